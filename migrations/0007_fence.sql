-- jobq schema 7: each process's own liveness bounds, for reapers to judge it by, and the kinds a worker
-- serves.
--
-- A worker that cannot confirm it is alive (write its heartbeat) for fence_ms stops its running jobs
-- (self-fencing, see src/fence.rs). A reaper may reset a claimant judged only by a lost session or an
-- old heartbeat no earlier than heartbeat_at + fence_ms + a margin, by the database clock, so the
-- claimant's copies are gone before anyone else starts one. heartbeat_ms is how often the process
-- writes its heartbeat; a reaper never uses a lease shorter than three of them. Both are NULL for rows
-- written by older versions, which are then judged by the reaper's lease alone.
--
-- kinds lists the job kinds a worker has handlers for (comma-separated), so `jobq stats` and the
-- reaper can tell which due jobs no live worker will ever claim. NULL: not known (older versions).
--
-- Nullable columns at the end of the table: an instant change on MariaDB 10.3+ and MySQL 8.0.12+.
ALTER TABLE jobq_processes
  ADD COLUMN heartbeat_ms INT UNSIGNED NULL DEFAULT NULL,
  ADD COLUMN fence_ms INT UNSIGNED NULL DEFAULT NULL,
  ADD COLUMN kinds TEXT CHARACTER SET ascii COLLATE ascii_bin NULL DEFAULT NULL
