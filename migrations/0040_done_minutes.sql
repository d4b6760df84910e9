-- jobq schema 40: done jobs per minute, as the workers count them.
--
-- The dashboard's chart of the last hour counted done rows by finished_at through `state_claim (state,
-- claim, finished_at)`, the index every claim and every finish moves an entry in, which the schema's
-- next version drops (docs/performance.md). Instead each worker process counts the jobs it saw finish
-- done (by its own finish, a handler's transaction or the application's `jobq_finish`) and adds them
-- here with its heartbeat, every few seconds, and once more when it stops: one row per minute and
-- process, written only by that process (on a Galera cluster no two nodes write one row), at the
-- database's clock when the count is written. A process killed by SIGKILL loses the count of its last
-- heartbeat interval; the jobs themselves are not affected. Reapers remove rows older than two hours.
-- Dead jobs are still counted from their rows (the `rare_state` index of schema 39).
CREATE TABLE IF NOT EXISTS jobq_done_minutes (
  minute  INT UNSIGNED NOT NULL COMMENT 'minutes since 1970-01-01 00:00 UTC, database clock',
  holder  VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the claimant''s token',
  done    BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (minute, holder)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
