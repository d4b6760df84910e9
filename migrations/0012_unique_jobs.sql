-- jobq schema 12: unique jobs.
--
-- unique_key is an optional key of the application's choosing. While a job with a key is queued, waiting
-- to retry or running, no other job with the same key can be inserted: unique_live is the key in those
-- states and NULL in every other, and its UNIQUE index refuses a second live row with error 1062 (NULLs
-- never collide in a UNIQUE index; MySQL and MariaDB have no partial index, so a generated column stands
-- in for one). Once the job is done, dead or cancelled the key is free again. `INSERT IGNORE` or
-- `ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)` turn the refusal into "keep the one there" from
-- plain SQL (README, "Unique jobs").
--
-- Why the columns are what they are:
-- * VARBINARY(255): the key is compared byte for byte. Every `_bin` collation of both servers pads with
--   spaces (utf8mb4_bin and ascii_bin are PAD SPACE on MariaDB 10.11 and MySQL 8), so 'k' and 'k ' would be
--   one key; a binary string has no collation and no padding, holds any UTF-8 text an application
--   builds its keys from (e-mail addresses, paths), and compares the same under any client's connection
--   collation. 255 bytes keep both index entries small (src/name.rs checks the width before a statement
--   is sent).
-- * unique_live is VIRTUAL, unlike ready_queue (0001, STORED): adding a STORED column rebuilds the whole
--   table (ALGORITHM=COPY, writes blocked). Measured on MariaDB 10.11 on a 2-core machine with 200,000
--   jobs (32 MB of rows): the three statements below took 0.01 s (instant), 0.01 s (instant) and 0.20 s
--   (in-place index build, reads and writes allowed), against 1.24 s for the same change with a STORED
--   column, a copy that grows with the table and holds off every enqueue and claim while it runs. MariaDB
--   adds a virtual column in place only by itself ("INPLACE ADD or DROP of virtual columns cannot be
--   combined with other ALTER TABLE actions"), hence three statements; each is safe to run again (a
--   duplicate column or index is taken as applied).
-- * A claim or a finish changes state but not unique_live for a job without a key (NULL before and
--   after), and a claim changes neither for a job with one (queued and running are both live): the
--   UNIQUE index is written when a keyed job is inserted and when it leaves the live states, never on
--   the claim path of anyone. Each index took 3.7 MB for the 200,000 rows.
-- * The index unique_key (unique_key) serves "a done job with this key finished within a period"
--   (enqueue's unique_for) and an operator's "which jobs had this key". unique_key never changes after
--   the insert, so this index is never rewritten either; it is not on finished_at, which every finish
--   writes.
ALTER TABLE job_queue ADD COLUMN unique_key VARBINARY(255) NULL DEFAULT NULL;

ALTER TABLE job_queue
  ADD COLUMN unique_live VARBINARY(255)
    AS (IF(state IN ('queued', 'retry', 'running'), unique_key, NULL)) VIRTUAL;

ALTER TABLE job_queue ADD UNIQUE KEY unique_live (unique_live), ADD KEY unique_key (unique_key);
