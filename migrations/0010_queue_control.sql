-- jobq schema 10: views for the DBA, and the schedules' change log.
--
-- The views answer in plain SQL what Oracle's DBA_JOBS and DBA_JOBS_RUNNING answer for DBMS_JOB: what is
-- waiting and when it runs next, what is running where and for how long. They are written for both
-- MariaDB 10.6+ and MySQL 8 (no server-only functions). Each is:
-- * SQL SECURITY INVOKER: selecting from a view needs SELECT on the tables under it, so a view never
--   shows a user more than the tables would, and it keeps working after the account that ran
--   `jobq migrate` is dropped (a DEFINER view fails once its definer is gone).
-- * ALGORITHM = MERGE, with no subquery in the select list (MySQL and MariaDB refuse to merge those): a
--   WHERE on the view is applied to the base table, so `WHERE id = 7` is a primary-key read and
--   `WHERE state = 'running'` uses job_queue's indexes, instead of materialising every job first.
-- * NOW(6) in a view is evaluated per query, so the due and running-time columns are as of the SELECT.
--
-- jobq_jobs: every job. status refines state with the time: a queued or retry job is `due` once run_at
-- has passed and `waiting` (queued) or `backoff` (retry) before; a running job with a cancel request is
-- `cancelling`. next_run_at is run_at while the job waits, NULL otherwise. failures counts the attempts
-- used that did not succeed (failures, interruptions, resets after a dead claimant): the number that
-- max_attempts bounds. Snoozed attempts are not counted (see jobq_attempts' outcome 'snoozed').
CREATE OR REPLACE ALGORITHM = MERGE SQL SECURITY INVOKER VIEW jobq_jobs AS
SELECT
  j.id,
  j.queue,
  j.kind,
  j.priority,
  CAST(j.state AS CHAR(16)) AS state,
  CASE
    WHEN j.state = 'queued' AND j.run_at <= NOW(6) THEN 'due'
    WHEN j.state = 'queued' THEN 'waiting'
    WHEN j.state = 'retry' AND j.run_at <= NOW(6) THEN 'due'
    WHEN j.state = 'retry' THEN 'backoff'
    WHEN j.state = 'running' AND j.cancel_requested_at IS NOT NULL THEN 'cancelling'
    ELSE CAST(j.state AS CHAR(16))
  END AS status,
  IF(j.state IN ('queued', 'retry'), j.run_at, NULL) AS next_run_at,
  j.attempts,
  j.max_attempts,
  CAST(GREATEST(CAST(j.attempts AS SIGNED) - IF(j.state IN ('running', 'done'), 1, 0), 0) AS SIGNED)
    AS failures,
  j.last_error,
  j.timeout_secs,
  j.created_at,
  j.started_at,
  j.finished_at,
  j.claim,
  j.cancel_requested_at
FROM job_queue j;

-- jobq_jobs_running: running jobs with their claimant. A claim token is
-- `host:pid:connection_id:server_id-epoch:nonce` (src/token.rs); the claimant's jobq_processes row is
-- found by its token (the primary key). host and pid come from that row, or from the token when the
-- claimant is no longer registered (it died, and a reaper will reset the row: registered = 0).
-- connection_id is the registry's, which follows the claimant's anchor session when that session was
-- re-established; the token's is the one it had when it claimed. Join it with
-- information_schema.PROCESSLIST on ID to see the claimant's session; a connection id is only
-- meaningful on the server whose server_id and server_epoch the row names (ids restart with the
-- server, and on Galera every node numbers its own sessions).
CREATE OR REPLACE ALGORITHM = MERGE SQL SECURITY INVOKER VIEW jobq_jobs_running AS
SELECT
  j.id,
  j.queue,
  j.kind,
  j.priority,
  j.attempts AS attempt,
  j.max_attempts,
  j.claimed_at,
  j.started_at,
  TIMESTAMPDIFF(SECOND, COALESCE(j.started_at, j.claimed_at), NOW(6)) AS running_secs,
  j.timeout_secs,
  j.cancel_requested_at,
  COALESCE(p.host, SUBSTRING_INDEX(j.claim, ':', 1)) AS host,
  COALESCE(p.pid, CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(j.claim, ':', 2), ':', -1) AS UNSIGNED)) AS pid,
  COALESCE(p.connection_id,
           CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(j.claim, ':', 3), ':', -1) AS UNSIGNED)) AS connection_id,
  p.server_id,
  p.server_epoch,
  p.heartbeat_at,
  IF(p.token IS NULL, 0, 1) AS registered,
  j.claim
FROM job_queue j
LEFT JOIN jobq_processes p ON p.token = j.claim
WHERE j.state = 'running';

-- jobq_schedules_next: every schedule with its state and next run. status is `due` for an enabled
-- schedule whose next run has passed (a scheduler makes its job on its next tick), `enabled` before
-- that, else the state (paused, finished, broken). overdue_secs is how late a due schedule is.
CREATE OR REPLACE ALGORITHM = MERGE SQL SECURITY INVOKER VIEW jobq_schedules_next AS
SELECT
  s.id,
  s.name,
  s.kind,
  s.queue,
  s.spec,
  s.time_zone,
  CAST(s.state AS CHAR(16)) AS state,
  IF(s.state = 'enabled' AND s.next_run_at <= NOW(6), 'due', CAST(s.state AS CHAR(16))) AS status,
  s.next_run_at,
  IF(s.state = 'enabled' AND s.next_run_at <= NOW(6),
     TIMESTAMPDIFF(SECOND, s.next_run_at, NOW(6)), NULL) AS overdue_secs,
  s.last_run_at,
  s.consecutive_failures,
  s.broken_after,
  s.total_runs,
  s.total_failures,
  s.skipped_runs,
  s.last_error
FROM jobq_schedules s;

-- jobq_schedule_log: who changed a schedule, how and why (CockroachDB's scheduled jobs keep who paused
-- one and why). One row per create, update, pause, resume, abort, drop, run-now, and per change the
-- scheduler makes itself (broken after too many failures, paused by on_error = 'pause'), written in the
-- same transaction as the change where there is one. schedule keeps the name, so a dropped schedule's
-- history stays readable; schedule_id tells a schedule from a later one of the same name. action is
-- VARCHAR rather than ENUM so that a later version adds actions without rewriting the table. actor is
-- the OS user for the CLI, the signed-in user for the dashboard, the caller's choice (else "library")
-- for library calls, and "scheduler" for the scheduler's own changes. `jobq prune` leaves it alone, like
-- jobq_audit.
CREATE TABLE IF NOT EXISTS jobq_schedule_log (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  at           TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  schedule_id  BIGINT UNSIGNED NOT NULL,
  schedule     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  action       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  actor        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  reason       TEXT NULL,
  PRIMARY KEY (id),
  KEY schedule (schedule, id),
  KEY at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
