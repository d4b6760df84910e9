-- jobq schema 1: the queue table that applications write to.
--
-- `INSERT INTO job_queue (kind) VALUES ('x')` is a complete job: every other column has a default.
--
-- Why the columns are what they are:
-- * Identifier columns (queue, kind, state, claim) are ASCII with a binary collation. sqlx and other
--   clients set their own connection collation (utf8mb4_unicode_ci); a utf8mb4 column with another
--   collation on the left of `queue = ?` kept MariaDB from using the claim index for the ORDER BY
--   (it read and sorted every ready row). A binary ASCII column compares the same under any client.
-- * Times are TIMESTAMP(6), not DATETIME(6): a TIMESTAMP is an instant, stored in UTC and shown in the
--   session's time zone, so `run_at <= NOW(6)` is right whatever time zone the inserting application's
--   session uses. A DATETIME default of NOW(6) would be the inserting session's local wall time, and an
--   application at UTC+2 would see its jobs start two hours late. The cost: TIMESTAMP ends in January 2038
--   on MySQL 8 and MariaDB before 11.5, so run_at cannot be set past that.
-- * payload is JSON: MariaDB checks it with json_valid() and MySQL with its JSON type, so a row can never
--   carry a payload that handlers cannot parse. The default is '{}' (an expression default, which both
--   MariaDB 10.2+ and MySQL 8.0.13+ accept).
-- * priority: smaller runs first, like nice(1). max_attempts defaults to 20: with the default backoff
--   (2 s doubling to a 1 h cap) a job that keeps failing is retried for about 7 hours before it is dead.
-- * timeout_secs: per-job maximum run time; NULL means the handler's configured timeout, else the
--   worker's default (30 minutes).
-- * ready_queue is the queue name while the job can be claimed (state queued or retry) and NULL otherwise.
--   It exists for the claim index: two claimable states under `state IN (...)` would make the server read
--   both ranges and sort them, while one column gives one contiguous range already in claim order.
--   It is STORED rather than VIRTUAL because indexes on virtual columns have had crash-recovery and purge
--   bugs in MariaDB; the cost is a few bytes a row.
--
-- Indexes:
-- * claim_order (ready_queue, priority, run_at, id, kind) is the claim path. A claim is
--   `WHERE ready_queue = ? AND run_at <= NOW(6) AND kind IN (...) ORDER BY priority, run_at, id LIMIT n`:
--   an equality on the prefix then a walk in index order that stops after n rows. kind rides along at the
--   end so the server can skip rows of kinds this worker has no handler for inside the index (index
--   condition pushdown) without reading them. Finished, running and dead rows have ready_queue NULL and sit
--   in a range the claim never reads, so a large history does not slow claims.
-- * claimant (claim, state) answers "the rows this claimant holds" (fences, releases, the reaper) with a
--   tight range; an index on claim alone was planned as a scan once one worker had stamped most rows.
-- * finished (state, finished_at) lets pruning delete old done rows in small batches by range.
CREATE TABLE IF NOT EXISTS job_queue (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  queue         VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'default',
  kind          VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  payload       JSON NOT NULL DEFAULT ('{}'),
  priority      SMALLINT NOT NULL DEFAULT 0,
  run_at        TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  state         ENUM('queued','running','done','retry','dead','cancelled')
                  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'queued',
  attempts      SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  max_attempts  SMALLINT UNSIGNED NOT NULL DEFAULT 20,
  timeout_secs  INT UNSIGNED NULL DEFAULT NULL,
  last_error    TEXT NULL,
  claim         VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin NULL DEFAULT NULL,
  claimed_at    TIMESTAMP(6) NULL DEFAULT NULL,
  created_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  started_at    TIMESTAMP(6) NULL DEFAULT NULL,
  finished_at   TIMESTAMP(6) NULL DEFAULT NULL,
  ready_queue   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin
                  AS (IF(state IN ('queued', 'retry'), queue, NULL)) STORED,
  PRIMARY KEY (id),
  KEY claim_order (ready_queue, priority, run_at, id, kind),
  KEY claimant (claim, state),
  KEY finished (state, finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
