-- jobq schema 28: an ordered enqueue from plain SQL.
--
-- jobq: one statement
--
-- `CALL jobq_enqueue_ordered(kind, payload, order_key, halt)` enqueues a job of `kind` with `payload`
-- (JSON text) that runs after every job enqueued before it with the same `order_key`, one at a time
-- (schema 27), and answers with one row, one column: `id`, the new job's. With `halt` false, a job
-- of the key that ends dead lets the next one run; with `halt` true it holds the key until an operator
-- retries it (it runs again first), cancels or deletes it. Other columns (queue, priority, ...) keep
-- their defaults; set them with an UPDATE of the new id in the same transaction, before it commits.
--
-- Inside the caller's transaction it locks the key's row in jobq_order_keys until that transaction
-- ends, so enqueuers of one key take turns, and the predecessor's row, so that the predecessor's
-- finish, which must see its new dependent, waits for the caller's COMMIT: keep such transactions
-- short. It is what the library's ordered enqueue does (src/db/enqueue/ordered.rs), statement for
-- statement. SQL SECURITY DEFINER, as jobq_finish (schema 21): `GRANT EXECUTE ON PROCEDURE
-- app.jobq_enqueue_ordered` is all an application needs, and the definer is the account that ran
-- `jobq migrate`.
CREATE PROCEDURE IF NOT EXISTS jobq_enqueue_ordered(
  IN p_kind VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_payload LONGTEXT CHARACTER SET utf8mb4,
  IN p_order_key VARBINARY(255),
  IN p_halt BOOLEAN
)
MODIFIES SQL DATA
SQL SECURITY DEFINER
BEGIN
  DECLARE v_tail BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_tail_state VARCHAR(16) DEFAULT NULL;
  DECLARE v_waits BOOLEAN DEFAULT FALSE;
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_tail_state = NULL;
  IF p_order_key IS NULL OR LENGTH(p_order_key) = 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'jobq_enqueue_ordered: the order key must not be empty';
  END IF;
  INSERT INTO jobq_order_keys (order_key) VALUES (p_order_key)
    ON DUPLICATE KEY UPDATE tail_id = tail_id;
  SELECT tail_id INTO v_tail FROM jobq_order_keys WHERE order_key = p_order_key FOR UPDATE;
  IF v_tail <> 0 THEN
    SELECT CAST(state AS CHAR) INTO v_tail_state FROM job_queue WHERE id = v_tail FOR UPDATE;
  END IF;
  SET v_waits = v_tail_state IN ('queued', 'retry', 'running', 'waiting')
    OR (p_halt AND v_tail_state = 'dead');
  INSERT INTO job_queue (kind, payload, order_key, state)
    VALUES (p_kind, COALESCE(p_payload, '{}'), p_order_key, IF(v_waits, 'waiting', 'queued'));
  SET v_id = LAST_INSERT_ID();
  IF v_waits THEN
    INSERT INTO jobq_job_deps (job_id, after_id, until) VALUES (v_id, v_tail, IF(p_halt, 'halt', 'next'));
    UPDATE job_queue SET has_dependents = TRUE WHERE id = v_tail AND has_dependents = FALSE;
  END IF;
  UPDATE jobq_order_keys SET tail_id = v_id WHERE order_key = p_order_key;
  SELECT v_id AS id;
END
