-- jobq schema 22: a running job's progress, and the output a job leaves.
--
-- * progress (0 to 100, two decimals) and progress_message (up to 255 characters): what the handler last
--   reported while it ran. reported_attempt is the attempt that reported it, so that a later attempt's
--   reader can tell a stale report from a live one; reported_at is when.
-- * output: JSON the handler left (at most 64 KiB, checked by the writer: the library, the command
--   handler's output file, or the jobq_output procedure of schema 24). It stays with the row until the
--   row is pruned or deleted.
--
-- Every write is fenced like a finish (the row still carries the writer's claim and attempt and is
-- running), so a copy whose claim was lost cannot overwrite what a later attempt reported. The columns
-- are NULL until a job reports, so a job that never does costs nothing, and no index reads them: the
-- claim and the finishes do not change. ADD COLUMN rebuilds job_queue on MariaDB 10.11, with writes
-- waiting (its STORED and indexed virtual columns rule out an instant or online change; docs/operations.md,
-- "Upgrading"); MySQL 8.0.12+ adds the columns instantly.
ALTER TABLE job_queue
  ADD COLUMN progress DECIMAL(5, 2) NULL DEFAULT NULL,
  ADD COLUMN progress_message VARCHAR(255) NULL DEFAULT NULL,
  ADD COLUMN reported_attempt SMALLINT UNSIGNED NULL DEFAULT NULL,
  ADD COLUMN reported_at TIMESTAMP(6) NULL DEFAULT NULL,
  ADD COLUMN output MEDIUMTEXT NULL DEFAULT NULL;
