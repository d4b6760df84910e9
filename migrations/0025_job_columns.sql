-- jobq schema 25: the columns of debounced jobs, ordered keys, fair shares, priority aging and trace
-- context, in one statement.
--
-- * debounce_key, debounced: a debounced job's key and how many enqueues merged into it (schema 26).
-- * order_key, order_lanes: the key of an ordered job or a fair share (schema 27) and how many of its
--   jobs may run at once (1: one at a time, in order), for `jobq jobs show`, the dashboard and the API,
--   and for the release of a job of a key, which puts it behind the jobs already due (src/db/deps);
--   order_spacing_us, a fair share's rate: a job of a lane starts at least this long after the one
--   before it in its lane started (NULL: no rate).
-- * base_priority: the priority a job was enqueued with, written the first time aging raises it
--   (schema 29; NULL: never aged).
-- * traceparent: the W3C trace context a job was enqueued under (docs/traces.md), `00-<trace id>-
--   <parent span id>-<flags>` exactly as the HTTP header carries it, set by the library
--   (NewJob::traceparent, or the current span with the `otel` feature), `jobq enqueue --traceparent`,
--   or an application's own INSERT. Every attempt's handlers receive it (or, when the worker exports
--   spans, the context of the attempt's span, a child of it). ascii_bin: lowercase hex and dashes,
--   compared byte for byte. No CHECK constraint, on purpose, though the format is strict (the library
--   and `jobq enqueue` refuse anything else): measured on MariaDB 10.11, a CHECK is evaluated by every
--   UPDATE of the row, so a row written past it (check_constraint_checks = 0; MySQL before 8.0.16
--   ignores CHECK) made the claim's stamp fail with error 4025 on every try, and with it every other row
--   of the claim: one bad value stalled its queue. A worker that finds a malformed value runs the job
--   without a parent and logs why. No index reads it; the claim reads it from the row it already reads
--   by primary key.
--
-- One statement because each ADD COLUMN rebuilds job_queue on MariaDB 10.11: its STORED generated
-- column (ready_queue, schema 1) rules out ALGORITHM=INSTANT, and its indexed virtual column
-- (unique_live, schema 12) an online rebuild (LOCK=NONE: "online rebuild with indexed virtual
-- columns"), so the rebuild holds a shared lock and enqueues, claims and finishes wait for it. Measured on a 2-core machine with 200,000 jobs: 1.6 s. Seven columns cost one
-- rebuild this way, not four. Run `jobq migrate` at a quiet time on a large queue (docs/operations.md,
-- "Upgrading"). MySQL 8.0.29+ adds the columns instantly. A duplicate column is taken as applied.
ALTER TABLE job_queue
  ADD COLUMN debounce_key VARBINARY(255) NULL DEFAULT NULL,
  ADD COLUMN debounced INT UNSIGNED NOT NULL DEFAULT 0,
  ADD COLUMN order_key VARBINARY(255) NULL DEFAULT NULL,
  ADD COLUMN order_lanes SMALLINT UNSIGNED NOT NULL DEFAULT 1,
  ADD COLUMN order_spacing_us BIGINT UNSIGNED NULL DEFAULT NULL,
  ADD COLUMN base_priority SMALLINT NULL DEFAULT NULL,
  ADD COLUMN traceparent VARCHAR(55) CHARACTER SET ascii COLLATE ascii_bin NULL DEFAULT NULL
