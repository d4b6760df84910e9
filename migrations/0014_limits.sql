-- jobq schema 14: global limits on jobs, across every worker on every host. A row with per_secs = 0 is
-- a concurrency limit: at most max_jobs jobs of kind K (scope 'kind') or of queue Q (scope 'queue') run
-- at once; 0 holds them all. A row with per_secs > 0 is a rate limit: at most max_jobs of them start per
-- per_secs seconds, counted in fixed windows (window_start, window_claims). A kind or queue may have both,
-- and several rates.
--
-- A claim under limits runs in one transaction that first writes each limit row (the write is the lock:
-- claims under one limit take turns, and on a Galera cluster, where row locks do not cross nodes, two
-- nodes' claims conflict at certification and one is retried), then reads what each leaves room for
-- (a concurrency limit counts the running jobs; a rate limit reads its window) and claims at most the
-- least; a rate limit's window count goes up by what was claimed. A finish never touches this table, so
-- a busy limited kind costs row writes per claim, not per job, and no lock is held while jobs run (the
-- semaphore rows of a peer queue, updated at every start and end, deadlocked and stormed under load).
-- Unlimited kinds and queues claim as before; workers read this table at most once a second.
CREATE TABLE IF NOT EXISTS jobq_limits (
  scope          VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name           VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  per_secs       INT UNSIGNED NOT NULL DEFAULT 0,
  max_jobs       INT UNSIGNED NOT NULL,
  set_at         TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  set_by         VARCHAR(255) NOT NULL DEFAULT '',
  claimed_at     TIMESTAMP(6) NULL DEFAULT NULL,
  window_start   TIMESTAMP(6) NULL DEFAULT NULL,
  window_claims  INT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (scope, name, per_secs)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
