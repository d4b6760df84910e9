-- jobq schema 28: an ordered or fair-share enqueue from plain SQL.
--
-- jobq: one statement
--
-- `CALL jobq_enqueue_keyed(kind, payload, key, lanes, halt)` enqueues a job of `kind` with `payload`
-- (JSON text) under `key` (schema 27) and answers with one row, one column: `id`, the new job's. With
-- `lanes` 1 the jobs of the key run one at a time, in the order they were enqueued (an ordered key);
-- with more (at most 64), at most that many run at once (a fair share), each lane in order. With `halt`
-- false, a job that ends dead lets the next one of its lane run; with `halt` true it holds its lane
-- until an operator retries it (it runs again first), cancels or deletes it. Other columns (queue,
-- priority, ...) keep their defaults; set them with an UPDATE of the new id in the same transaction,
-- before it commits.
--
-- Inside the caller's transaction it locks the key's lane rows in jobq_order_keys until that
-- transaction ends, so enqueuers of one key take turns, and the predecessor's row, so that the
-- predecessor's finish, which must see its new dependent, waits for the caller's COMMIT: keep such
-- transactions short. It is what the library's keyed enqueue does (src/db/enqueue/ordered.rs), statement
-- for statement. SQL SECURITY DEFINER, as jobq_finish (schema 21): `GRANT EXECUTE ON PROCEDURE
-- app.jobq_enqueue_keyed` is all an application needs, and the definer is the account that ran
-- `jobq migrate`.
CREATE PROCEDURE IF NOT EXISTS jobq_enqueue_keyed(
  IN p_kind VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_payload LONGTEXT CHARACTER SET utf8mb4,
  IN p_key VARBINARY(255),
  IN p_lanes SMALLINT UNSIGNED,
  IN p_halt BOOLEAN
)
MODIFIES SQL DATA
SQL SECURITY DEFINER
BEGIN
  DECLARE v_lane SMALLINT UNSIGNED DEFAULT 0;
  DECLARE v_tail BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_tail_state VARCHAR(16) DEFAULT NULL;
  DECLARE v_waits BOOLEAN DEFAULT FALSE;
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE v_i SMALLINT UNSIGNED DEFAULT 0;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_tail_state = NULL;
  IF p_key IS NULL OR LENGTH(p_key) = 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'jobq_enqueue_keyed: the key must not be empty';
  END IF;
  IF p_lanes IS NULL OR p_lanes < 1 OR p_lanes > 64 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'jobq_enqueue_keyed: lanes must be from 1 to 64';
  END IF;
  WHILE v_i < p_lanes DO
    INSERT INTO jobq_order_keys (order_key, lane) VALUES (p_key, v_i)
      ON DUPLICATE KEY UPDATE tail_id = tail_id;
    SET v_i = v_i + 1;
  END WHILE;
  SELECT k.lane, k.tail_id INTO v_lane, v_tail
    FROM jobq_order_keys k LEFT JOIN job_queue j ON j.id = k.tail_id
    WHERE k.order_key = p_key AND k.lane < p_lanes
    ORDER BY COALESCE(CAST(j.state AS CHAR) IN ('queued', 'retry', 'running', 'waiting')
                      OR (p_halt AND CAST(j.state AS CHAR) = 'dead'), FALSE), k.tail_id, k.lane
    LIMIT 1;
  IF v_tail <> 0 THEN
    SELECT CAST(state AS CHAR) INTO v_tail_state FROM job_queue WHERE id = v_tail FOR UPDATE;
  END IF;
  SET v_waits = COALESCE(v_tail_state IN ('queued', 'retry', 'running', 'waiting')
    OR (p_halt AND v_tail_state = 'dead'), FALSE);
  INSERT INTO job_queue (kind, payload, order_key, order_lanes, state)
    VALUES (p_kind, COALESCE(p_payload, '{}'), p_key, p_lanes, IF(v_waits, 'waiting', 'queued'));
  SET v_id = LAST_INSERT_ID();
  IF v_waits THEN
    INSERT INTO jobq_job_deps (job_id, after_id, until) VALUES (v_id, v_tail, IF(p_halt, 'halt', 'next'));
    UPDATE job_queue SET has_dependents = TRUE WHERE id = v_tail AND has_dependents = FALSE;
  END IF;
  UPDATE jobq_order_keys SET tail_id = v_id WHERE order_key = p_key AND lane = v_lane;
  SELECT v_id AS id;
END
