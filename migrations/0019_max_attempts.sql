-- jobq schema 19: a job's max_attempts is NULL unless its enqueuer set one.
--
-- Until now the column defaulted to 20, so a worker could not tell a job that asked for 20 attempts (or
-- for 1) from one that said nothing, and a handler's max_attempts replaced the job's in both cases: a job
-- enqueued with --max-attempts 1 ran 3 times under a handler saying 3. Now, as for timeout_secs (0001):
-- * max_attempts NULL means "the handler's, else 20" (20: with the default backoff, 2 s doubling to a 1 h
--   cap, a job that keeps failing is retried for about 7 hours before it is dead). A plain-SQL INSERT
--   that leaves the column out leaves it NULL; `jobq enqueue` and the library write it only when asked.
-- * A value in the row is the job's own and wins over the handler's.
-- * A worker that fails an attempt of a job without its own writes the bound it applied into the row
--   (as before), so the row, `jobq jobs show` and the views show what the job was judged by, and a
--   reaper that resets the row after its claimant died (it knows no handler) applies the same bound.
--   A reaper applies 20 to a row still NULL: what it applied before, when the column held 20.
--
-- Making the column nullable rebuilds job_queue on MariaDB 10.11: 1.55 s for 200,000 rows (37 MB) on a
-- 2-core machine, against 0.06 s to run it again (nothing to change). The rebuild is not online (the
-- indexed virtual column of schema 12 rules out LOCK=NONE), so writes wait for it (docs/operations.md,
-- "Upgrading"). MySQL 8 also rebuilds in place.
ALTER TABLE job_queue MODIFY COLUMN max_attempts SMALLINT UNSIGNED NULL DEFAULT NULL;

-- The jobs that have not run yet keep what they had: a 20 in a live row is the old default (an enqueuer
-- that asked for exactly 20 got the handler's bound before too). Through the `finished` index's ranges of
-- these states, so finished history is not read; safe to run again.
UPDATE job_queue SET max_attempts = NULL
WHERE state IN ('queued', 'retry', 'waiting') AND max_attempts = 20;
