-- jobq schema 29: priority aging.
--
-- A queue with a row in jobq_queue_aging has its waiting jobs gain priority while they wait: one step
-- (priority - 1) for every `every_secs` a job has been due, never past `floor_priority`, nor past the
-- most urgent priority among the queue's waiting jobs (NULL: only the latter). Low-priority work is then
-- delayed by a flood of urgent work but never starved by it. The reaper's aging pass does it
-- (src/reaper/aging.rs says why the reaper), in bounded batches: per queue and priority level it looks
-- only at the oldest due entries of the claim index, so its reads follow the number of levels, not the
-- backlog. The claim is not changed at all: it orders by `priority` as it always did, and a queue with
-- no row here costs nothing anywhere.
--
-- Why the columns are what they are:
-- * queue has job_queue.queue's width and collation, as jobq_queues (schema 11), for the same reason.
-- * every_secs is DECIMAL(9, 3): whole minutes in production ("300" for one step per 5 minutes), and
--   milliseconds in tests, from plain SQL without a unit to get wrong. The CHECK keeps a zero or
--   negative step out (MariaDB 10.2+ and MySQL 8.0.16+ enforce it); the library also refuses more than a
--   week, and the pass skips a row it cannot use with a warning.
-- * job_queue.base_priority (schema 25) is the priority a job was enqueued with, written by the pass the first time
--   it raises the job (NULL: never aged), so `jobq jobs show` can say "3 (aged from 10)", and so that a
--   retry or a snooze (the job ran; its wait is over) puts it back where its sender put it. A hand-back
--   that is not the job's doing (a release, a shutdown, a dead claimant) keeps what it earned. No index
--   reads it.
CREATE TABLE IF NOT EXISTS jobq_queue_aging (
  queue          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  every_secs     DECIMAL(9, 3) NOT NULL,
  floor_priority SMALLINT NULL DEFAULT NULL,
  set_at         TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  set_by         VARCHAR(255) NOT NULL DEFAULT '',
  PRIMARY KEY (queue),
  CONSTRAINT aging_step_positive CHECK (every_secs > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
