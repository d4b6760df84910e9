-- jobq schema 30: uniqueness that does not make every write of a kind collide on a Galera cluster.
--
-- The UNIQUE indexes of schemas 17 and 26 spanned (unique_live, kind) and (debounce_pending, kind). For a
-- job without a key the first column is NULL and the second is its kind, and Galera certifies every row
-- write against the values of every UNIQUE index of the row, (NULL, kind) included: every claim, finish and
-- INSERT of a kind carried the same certification key, so any two of them committed at once on two nodes
-- collided, whatever rows they touched. Measured on the 3-node test cluster (scripts/galera.sh), two
-- draining `jobq worker`s on two nodes, each on a queue of its own, 5,000 `DO 0` jobs each, one kind:
-- 21–150 conflicts per run with those indexes, 0 once the kind moved into a single-column key (the same
-- run with two kinds, or with the indexes dropped, gave 0 too). `jobq bench --sections cluster` counted
-- 229 conflicts for 20,000 jobs with "a queue per node", a layout that touches disjoint rows.
--
-- * unique_slot and debounce_slot are the kind and the key in one value, NULL for a job without a key (or
--   out of the states where the key holds): a NULL single-column key gives no certification key, so jobs
--   without keys never meet on one. The length prefix keeps the value unambiguous ('4:mail' + key).
--   VIRTUAL, as schemas 12 and 26: added in place.
-- * The UNIQUE indexes move to them; the old (unique_live, kind) and (debounce_pending, kind) indexes stay,
--   not unique, under their names: the look-ups an application makes in plain SQL (docs/unique-jobs.md,
--   docs/clients.md) keep their index, and a non-unique index gives Galera no certification key.
-- * The last statement adds the new constraints and drops the old ones at once, so there is no moment
--   without one. Run again, it stops at the duplicate key name (1061), which the migrator takes as
--   applied. It rebuilds no table: MariaDB 10.11 builds indexes on virtual columns in place (`jobq migrate`
--   from schema 29 took 0.59 s on 200,000 jobs, 20,000 of them with keys).
ALTER TABLE job_queue
  ADD COLUMN unique_slot VARBINARY(400)
    AS (IF(state IN ('queued', 'retry', 'running') AND unique_key IS NOT NULL,
           CONCAT(LENGTH(kind), ':', kind, unique_key), NULL)) VIRTUAL;

ALTER TABLE job_queue
  ADD COLUMN debounce_slot VARBINARY(400)
    AS (IF(state = 'queued' AND debounce_key IS NOT NULL,
           CONCAT(LENGTH(kind), ':', kind, debounce_key), NULL)) VIRTUAL;

ALTER TABLE job_queue
  ADD UNIQUE KEY unique_slot (unique_slot),
  ADD UNIQUE KEY debounce_slot (debounce_slot),
  DROP INDEX unique_live_kind,
  ADD KEY unique_live_kind (unique_live, kind),
  DROP INDEX debounce_pending_kind,
  ADD KEY debounce_pending_kind (debounce_pending, kind);
