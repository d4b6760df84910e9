-- jobq schema 18: rate limits count their starts in a sliding window.
--
-- Schema 14 counted a rate limit's starts in fixed windows (jobq_limits.window_start, window_claims): a
-- window opened at the first claim after the last one ended. Starts late in one window and early in the
-- next added up: "4 per 3 s" started 7 jobs within 0.62 s across a window edge. Now a claim under a rate
-- limit of N per P may start only as many jobs as leave at most N starts in the P that ends now; every
-- claim that starts jobs under the limit writes one row here (when, how many), in its transaction and
-- under the limit row's lock, after it stamps the jobs. So two starts N apart are always at least P
-- apart, and no period of length P, wherever it begins, holds more than N starts.
--
-- Why the table is what it is:
-- * One row per claim, not per job: a claim of 50 rows is one write. Rows older than the period are
--   deleted by the next claim that writes here, so a limit holds at most N rows (a claim starts at least
--   one job), and in practice about as many as claims in one period.
-- * The primary key leads with the limit's key (the columns of jobq_limits' key) and ends with the time:
--   the sum over the last period and the delete of older rows are both one range of it.
-- * at is TIMESTAMP(6), compared with NOW(6) like every time in jobq (0001 says why not DATETIME).
-- * jobq_limits.window_start and window_claims are no longer written or read; they stay (dropping a
--   column rewrites the table on MySQL 8, for nothing).
CREATE TABLE IF NOT EXISTS jobq_limit_starts (
  scope     VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  per_secs  INT UNSIGNED NOT NULL,
  at        TIMESTAMP(6) NOT NULL,
  jobs      INT UNSIGNED NOT NULL,
  PRIMARY KEY (scope, name, per_secs, at)
) ENGINE = InnoDB
