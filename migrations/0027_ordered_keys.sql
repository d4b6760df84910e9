-- jobq schema 27: ordered keys.
--
-- Jobs that share an order key run one at a time, in the order they were enqueued, while jobs of other
-- keys run beside them (webhooks per endpoint, ledger postings per account). An ordered job waits for
-- the job enqueued before it with the same key, as a dependency (schema 16): the chain is made of the
-- edges jobs already wait on, so a job of a key is released by its predecessor's own finish (schema
-- 20), by an operator's cancel or delete, or by the reaper's sweep, with nothing new on the claim's path.
--
-- * jobq_order_keys holds each key's last enqueued job (tail_id). An ordered enqueue first writes the
--   key's row (`INSERT … ON DUPLICATE KEY UPDATE`, which locks it whatever the isolation level), reads
--   the tail, inserts the job waiting for it, and moves the tail: enqueuers of one key take turns on that
--   row, so two new jobs never wait for the same predecessor. A finish never touches the table.
-- * Two ways to wait for a predecessor, appended to jobq_job_deps.until: 'next' waits until it has
--   ended in any way (done, dead or cancelled: a failure holds the key through its retries, then the key
--   goes on), 'halt' until it is done or cancelled (a job that ends dead holds the key until an operator
--   retries it, which runs it again first, or cancels or deletes it). A predecessor that no longer exists
--   (deleted, pruned) holds nothing. Unlike 'ended', neither adds outcome counts to the payload.
-- * job_queue.order_key (schema 25) records the key for `jobq jobs show`, the dashboard and the API; the order is
--   the edges', so a row that sets the column by a plain INSERT is not ordered (SQL enqueues call
--   jobq_enqueue_ordered, schema 28).
--
-- The ENUM append is instant (schema 16 measured 13 ms on 200,000 rows). Each statement is safe to run
-- again.
ALTER TABLE jobq_job_deps MODIFY COLUMN until
  ENUM('done', 'ended', 'next', 'halt') CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'done';

CREATE TABLE IF NOT EXISTS jobq_order_keys (
  order_key   VARBINARY(255) NOT NULL,
  tail_id     BIGINT UNSIGNED NOT NULL DEFAULT 0,
  updated_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (order_key)
) ENGINE = InnoDB
