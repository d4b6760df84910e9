-- jobq schema 31: the DBA view jobq_jobs (schema 10) shows the columns later schemas added to job_queue,
-- after the ones it had, so a query naming the old columns reads the same: the unique key (schema 12),
-- the debounce key and its merge count (25), the order or fair-share key and its lanes (25), the priority
-- a job had before aging raised it (25, NULL when it never was), the progress a running job reported
-- (22), and the trace it was enqueued in (25). The output (22) stays out: it can be 64 KiB, and
-- `jobq jobs output ID` prints it. Still MERGE and SQL SECURITY INVOKER: a filter on the view reaches
-- job_queue's indexes, and a reader needs SELECT on job_queue as before.
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
  j.cancel_requested_at,
  j.unique_key,
  j.debounce_key,
  j.debounced,
  j.order_key,
  j.order_lanes,
  j.base_priority,
  j.progress,
  j.progress_message,
  j.traceparent
FROM job_queue j;
