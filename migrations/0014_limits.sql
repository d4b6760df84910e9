-- jobq schema 14: global concurrency limits. "At most max_running jobs of kind K (scope 'kind') or of
-- queue Q (scope 'queue') run at once, across every worker on every host"; 0 holds them all.
--
-- A claim of a limited kind or queue runs in one transaction that first writes its limit row (an UPDATE
-- of claimed_at), then counts the running jobs it limits and claims at most what is left. The write is
-- the lock: claims of one limited kind or queue take turns, and on a Galera cluster, where row locks do
-- not cross nodes, two nodes' claims of it conflict at certification and one is retried. A finish never
-- touches this table, so a busy limited kind costs one row write per claim, not per job, and no lock is
-- held while jobs run (the semaphore rows of a peer queue, updated at every start and end, deadlocked
-- and stormed under load). Unlimited kinds and queues claim as before, reading this table at most once a
-- second per worker.
CREATE TABLE IF NOT EXISTS jobq_limits (
  scope        VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  max_running  INT UNSIGNED NOT NULL,
  set_at       TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  set_by       VARCHAR(255) NOT NULL DEFAULT '',
  claimed_at   TIMESTAMP(6) NULL DEFAULT NULL,
  PRIMARY KEY (scope, name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
