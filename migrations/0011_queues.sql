-- jobq schema 11: paused queues.
--
-- A queue is paused while it has a row here. The claim checks it in the same statement
-- (`NOT EXISTS (SELECT 1 FROM jobq_queues WHERE name = ?)`), and so does an idle worker's probe: a pause
-- takes effect at the next claim of every worker on every host, and jobs already running finish. The
-- lookup is by primary key with a constant, which the optimizer resolves before it reads job_queue: for a
-- paused queue the plan is "Impossible WHERE" and no index entry of the queue is read, however many are
-- due (measured on MariaDB 10.11 with 300,000 due rows: Handler_read_next 0). A row per paused queue, not
-- a flag on the jobs: pausing writes one row, and enqueueing into a paused queue works as usual.
-- `name` has job_queue.queue's width and collation, so the lookup compares what the claim compares.
CREATE TABLE IF NOT EXISTS jobq_queues (
  name       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  paused_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  paused_by  VARCHAR(255) NOT NULL DEFAULT '',
  reason     VARCHAR(255) NULL DEFAULT NULL,
  PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
