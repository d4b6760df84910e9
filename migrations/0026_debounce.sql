-- jobq schema 26: debounced jobs.
--
-- A debounced job has a key, like a unique job, but a new enqueue of its kind and key while it is still
-- queued does not leave it as it is: it takes the new payload, and its run_at moves to the new enqueue's
-- (now + the window), never past the first enqueue's maximum wait. A burst of 1,000 "reindex customer 7"
-- becomes one job that runs once the burst is over, with the last payload.
--
-- * debounce_key is the key (schema 25; VARBINARY(255), compared byte for byte, for the reasons given in schema 12).
--   It is a column of its own rather than unique_key because it holds for less: only while the job is
--   queued. A running job has read its payload already, so an enqueue that arrives while it runs must
--   queue a new job (the change it announces would be lost otherwise), where a unique key held while
--   running is exactly what a unique job wants.
-- * debounce_pending is the key while the job is queued and NULL in every other state; its UNIQUE index on
--   (debounce_pending, kind) lets `INSERT … ON DUPLICATE KEY UPDATE` find the queued job of the key, so
--   plain SQL debounces in one statement (docs/debounce.md). VIRTUAL, as unique_live is (schema 12):
--   added instantly (0.04 s on 200,000 jobs), and its index is built while enqueues and claims go on
--   (0.32 s).
-- * debounced (schema 25) counts the enqueues merged into the job after the first, so `jobs show` and the dashboard
--   can say what a burst became.
--
-- Every statement that puts a started job back in the queue (a release at shutdown, a snooze, an
-- interrupted attempt, a reaper's reset) or makes an ended or waiting job runnable again (an operator's
-- retry, a dependency's release) also clears debounce_key: by then a new queued job of the key may exist,
-- which the UNIQUE index would not let the returning one join, and a started job has read its payload
-- already. Such a job runs as an ordinary one; the enqueues after it merge into the new one.
--
-- A claim moves a debounced job from queued to running and so rewrites its entry in the new index (once
-- per job); a job without a key has NULL before and after and costs the claim nothing. MariaDB adds a
-- virtual column in place only on its own, hence two statements; each is safe to run again.
ALTER TABLE job_queue
  ADD COLUMN debounce_pending VARBINARY(255)
    AS (IF(state = 'queued', debounce_key, NULL)) VIRTUAL;

ALTER TABLE job_queue ADD UNIQUE KEY debounce_pending_kind (debounce_pending, kind);
