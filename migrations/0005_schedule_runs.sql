-- jobq schema 5: schedule runs, one row per planned time that got a job.
--
-- * UNIQUE (schedule_id, planned_at) makes "exactly one job per planned time" a database fact: the run
--   row is inserted in the same transaction as its job, and a scheduler whose insert fails with a
--   duplicate key knows another one already made that run and creates no job.
-- * job_id links the run to its job in job_queue (no foreign key: job_queue stays a plain table that
--   applications write to and prune, and dropping a schedule deletes its runs itself).
-- * outcome stays NULL while the job has not ended; the scheduler fills it (done, dead, cancelled, or
--   missing when the job row is gone) when it sees the job end, together with the schedule's failure
--   count, with `WHERE outcome IS NULL` so that a run is counted once however many schedulers see it.
--   open (outcome, schedule_id) serves both "runs not ended yet" and "this schedule's active runs".
-- * finished (finished_at) lets pruning delete ended runs past the retention by range, like finished jobs.
-- * cause says why the run exists: scheduled, catch_up (a missed time), startup, manual (run-now).
CREATE TABLE IF NOT EXISTS jobq_schedule_runs (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  schedule_id  BIGINT UNSIGNED NOT NULL,
  planned_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  cause        ENUM('scheduled','catch_up','startup','manual')
                 CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'scheduled',
  job_id       BIGINT UNSIGNED NULL DEFAULT NULL,
  created_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  outcome      ENUM('done','dead','cancelled','missing') CHARACTER SET ascii COLLATE ascii_bin NULL DEFAULT NULL,
  started_at   TIMESTAMP(6) NULL DEFAULT NULL,
  finished_at  TIMESTAMP(6) NULL DEFAULT NULL,
  error        TEXT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY planned (schedule_id, planned_at),
  KEY open_runs (outcome, schedule_id),
  KEY job (job_id),
  KEY finished (finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
