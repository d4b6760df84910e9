-- jobq schema 41: no index of running and done rows. `state_claim (state, claim, finished_at)` goes,
-- and with it two index writes of every job (one when it is claimed, one when it finishes).
--
-- A job that runs and succeeds now moves entries in the claim index only (it leaves it when claimed);
-- what read `state_claim` reads elsewhere:
-- * running rows: the claimants' holdings lists (schema 38), each listed id one primary-key lookup;
-- * waiting, retry, dead and cancelled rows: `rare_state` (schema 39);
-- * done rows by age, for pruning: the primary key from its start (ids grow with created_at);
-- * done jobs per minute, for the dashboard: the workers' counts (schema 40);
-- * counts of done rows: the newest ids, a range of the primary key (src/db/gauges.rs).
-- Measured with worker processes of this version (docs/performance.md): a drain of no-op jobs ran
-- about a quarter faster without the index, at about a sixth less server CPU per job.
--
-- The view of running jobs is redefined through the lists (a running row that no list names, stamped
-- by plain SQL, shows once a reaper's sweep has listed it). Still MERGE: the subquery is in the WHERE,
-- so `WHERE id = 7` on the view stays a primary-key read.
--
-- Processes of an older jobq refuse to start on this schema; a dashboard or reaper of schema 40 or
-- older still running while this applies fails the reads that name the index until it is restarted
-- with this version. Run again, the DROP stops at the missing key (1091), which the migrator takes as
-- applied.
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
WHERE (j.id, j.claim) IN (
    SELECT l.id, h.holder FROM jobq_holdings h,
    JSON_TABLE(h.held_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) l)
  AND j.state = 'running';

ALTER TABLE job_queue DROP KEY state_claim, ALGORITHM = INPLACE, LOCK = NONE;
