-- jobq schema 9: the attempts of a job that did not end done.
--
-- A row is written in the same transaction as the change it records, so the history never disagrees
-- with the job: a failure that will be retried (retry), the last failure (dead), a cancel while it ran
-- (cancelled), a stop part way through a shutdown or the self-fence (interrupted), and a reset by a
-- reaper or supervisor after its claimant died (released). An attempt that ends done is not written:
-- the job row itself holds it (started_at, finished_at), and the hot path stays one statement per
-- batch of finishes. `jobq prune` deletes attempts that ended before the retention, with the jobs.
-- Rows have an id of their own: an operator's retry starts a job's attempts again at 1.
CREATE TABLE IF NOT EXISTS jobq_attempts (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  job_id      BIGINT UNSIGNED NOT NULL,
  attempt     SMALLINT UNSIGNED NOT NULL,
  outcome     VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  claim       VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin NULL DEFAULT NULL,
  started_at  TIMESTAMP(6) NULL DEFAULT NULL,
  ended_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  error       TEXT NULL,
  PRIMARY KEY (id),
  KEY job (job_id, id),
  KEY ended (ended_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
