-- jobq schema 27: ordered keys and fair shares.
--
-- Jobs that share an order key run at most `lanes` at a time (one, in the order they were enqueued, for
-- an ordered key: webhooks per endpoint, ledger postings per account; a few, for a fair share: "at most
-- 2 running per customer"), while jobs of other keys run beside them. A job of a key waits for the job
-- enqueued before it in its lane, as a dependency (schema 16): the chains are made of the edges jobs
-- already wait on, so a job is released by its predecessor's own finish (schema 20), by an operator's
-- cancel or delete, or by the reaper's sweep, with nothing new on the claim's path. However many jobs a
-- key has, at most `lanes` of them are queued or running: the rest wait outside the claim index, so one
-- tenant's flood cannot fill the head of a queue, and a released job is put behind the jobs already
-- due (its run_at becomes the release time), so keys take turns.
--
-- * jobq_order_keys holds each lane's last enqueued job (tail_id). An enqueue first writes the key's
--   lane rows (`INSERT … ON DUPLICATE KEY UPDATE`, which locks them whatever the isolation level, in
--   lane order), picks a lane (one whose last job has ended, else the one whose last job is oldest),
--   inserts the job waiting for that lane's tail, and moves the tail: enqueuers of one key take turns on
--   those rows, so two new jobs never wait for the same predecessor. A finish never touches the table.
-- * Two ways to wait for a predecessor, appended to jobq_job_deps.until: 'next' waits until it has
--   ended in any way (done, dead or cancelled: a failure holds the lane through its retries, then the
--   lane goes on), 'halt' until it is done or cancelled (a job that ends dead holds its lane until an
--   operator retries it, which runs it again first, or cancels or deletes it). A predecessor that no
--   longer exists (deleted, pruned) holds nothing. Unlike 'ended', neither adds outcome counts to the
--   payload.
-- * job_queue.order_key and order_lanes (schema 25) record the key for `jobq jobs show`, the dashboard
--   and the API; the order is the edges', so a row that sets the column by a plain INSERT is not
--   ordered (SQL enqueues call jobq_enqueue_keyed, schema 28).
--
-- The ENUM append is instant (schema 16 measured 13 ms on 200,000 rows). Each statement is safe to run
-- again.
ALTER TABLE jobq_job_deps MODIFY COLUMN until
  ENUM('done', 'ended', 'next', 'halt') CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'done';

CREATE TABLE IF NOT EXISTS jobq_order_keys (
  order_key   VARBINARY(255) NOT NULL,
  lane        SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  tail_id     BIGINT UNSIGNED NOT NULL DEFAULT 0,
  updated_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (order_key, lane)
) ENGINE = InnoDB
