-- jobq schema 28: an ordered or fair-share enqueue from plain SQL.
--
-- jobq: one statement
--
-- `CALL jobq_enqueue_keyed(kind, payload, key, lanes, halt, rate, per_secs)` enqueues a job of `kind` with `payload`
-- (JSON text) under `key` (schema 27) and answers with one row, one column: `id`, the new job's. With
-- `lanes` 1 the jobs of the key run one at a time, in the order they were enqueued (an ordered key);
-- with more (at most 64), at most that many run at once (a fair share), each lane in order. With `halt`
-- false, a job that ends dead lets the next one of its lane run; with `halt` true it holds its lane
-- until an operator retries it (it runs again first), cancels or deletes it. With `rate` (NULL for none)
-- at most `rate` jobs of the key start per `per_secs` seconds, spaced evenly (schema 25's
-- order_spacing_us: a lane's jobs start `per_secs × lanes / rate` apart). Other columns (queue,
-- priority, ...) keep their defaults; set them with an UPDATE of the new id in the same transaction,
-- before it commits.
--
-- It is safe with or without a transaction around it. Under autocommit each of its statements commits
-- on its own, so it cannot rely on a lock held from one to the next: the job is inserted `waiting`
-- first, and the lane's tail is swapped for it in one UPDATE (`LAST_INSERT_ID(tail_id)` hands the old
-- tail to this session alone), so two enqueuers of a key never get the same predecessor. The edge is
-- then stored and the predecessor marked as having a dependent, in that order, and the predecessor's
-- state read last: if it has ended already, the job releases itself; if not, the predecessor's finish,
-- which reads the mark under its row lock, sees the edge and releases it. (A connection lost between
-- the insert and the edge leaves a waiting job with no edge, which the reaper's sweep releases.) Inside
-- a transaction the same steps hold their locks to the COMMIT, including the predecessor's row, whose
-- finish then waits: keep such transactions short. One commit in a transaction against about six
-- under autocommit: call it in one when enqueueing many. It leaves LAST_INSERT_ID() at the new job's id.
-- SQL SECURITY DEFINER, as jobq_finish (schema 21): `GRANT EXECUTE ON PROCEDURE app.jobq_enqueue_keyed`
-- is all an application needs, and the definer is the account that ran `jobq migrate`.
CREATE PROCEDURE IF NOT EXISTS jobq_enqueue_keyed(
  IN p_kind VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_payload LONGTEXT CHARACTER SET utf8mb4,
  IN p_key VARBINARY(255),
  IN p_lanes SMALLINT UNSIGNED,
  IN p_halt BOOLEAN,
  IN p_rate INT UNSIGNED,
  IN p_per_secs DOUBLE
)
MODIFIES SQL DATA
SQL SECURITY DEFINER
BEGIN
  DECLARE v_lane SMALLINT UNSIGNED DEFAULT 0;
  DECLARE v_tail BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_tail_state VARCHAR(16) DEFAULT NULL;
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE v_i SMALLINT UNSIGNED DEFAULT 0;
  DECLARE v_spacing BIGINT UNSIGNED DEFAULT NULL;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_tail_state = NULL;
  IF p_key IS NULL OR LENGTH(p_key) = 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'jobq_enqueue_keyed: the key must not be empty';
  END IF;
  IF p_lanes IS NULL OR p_lanes < 1 OR p_lanes > 64 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'jobq_enqueue_keyed: lanes must be from 1 to 64';
  END IF;
  IF p_rate IS NOT NULL AND (p_rate < 1 OR p_per_secs IS NULL OR p_per_secs <= 0 OR p_per_secs > 86400) THEN
    SIGNAL SQLSTATE '45000'
      SET MESSAGE_TEXT = 'jobq_enqueue_keyed: a rate needs a count of at least 1 and per_secs above 0, at most 86400';
  END IF;
  IF p_rate IS NOT NULL THEN
    SET v_spacing = ROUND(p_per_secs * 1000000 * p_lanes / p_rate);
  END IF;
  WHILE v_i < p_lanes DO
    INSERT INTO jobq_order_keys (order_key, lane) VALUES (p_key, v_i)
      ON DUPLICATE KEY UPDATE tail_id = tail_id;
    SET v_i = v_i + 1;
  END WHILE;
  -- A lane whose last job has ended (the lowest), else the one whose last job is oldest.
  SELECT k.lane INTO v_lane
    FROM jobq_order_keys k LEFT JOIN job_queue j ON j.id = k.tail_id
    WHERE k.order_key = p_key AND k.lane < p_lanes
    ORDER BY COALESCE(CAST(j.state AS CHAR) IN ('queued', 'retry', 'running', 'waiting')
                      OR (p_halt AND CAST(j.state AS CHAR) = 'dead'), FALSE), k.tail_id, k.lane
    LIMIT 1;
  INSERT INTO job_queue (kind, payload, order_key, order_lanes, order_spacing_us, state)
    VALUES (p_kind, COALESCE(p_payload, '{}'), p_key, p_lanes, v_spacing, 'waiting');
  SET v_id = LAST_INSERT_ID();
  UPDATE jobq_order_keys SET tail_id = v_id + 0 * LAST_INSERT_ID(tail_id)
    WHERE order_key = p_key AND lane = v_lane;
  SET v_tail = LAST_INSERT_ID();
  IF v_tail <> 0 THEN
    INSERT IGNORE INTO jobq_job_deps (job_id, after_id, until)
      VALUES (v_id, v_tail, IF(p_halt, 'halt', 'next'));
    UPDATE job_queue SET has_dependents = TRUE WHERE id = v_tail AND has_dependents = FALSE;
    SELECT CAST(state AS CHAR) INTO v_tail_state FROM job_queue WHERE id = v_tail FOR UPDATE;
  END IF;
  IF NOT COALESCE(v_tail_state IN ('queued', 'retry', 'running', 'waiting')
                  OR (p_halt AND v_tail_state = 'dead'), FALSE) THEN
    UPDATE job_queue j JOIN job_queue p ON p.id = v_tail
      SET j.run_at = GREATEST(j.run_at, p.started_at + INTERVAL j.order_spacing_us MICROSECOND)
      WHERE j.id = v_id AND j.order_spacing_us IS NOT NULL AND p.started_at IS NOT NULL;
    UPDATE job_queue SET state = 'queued' WHERE id = v_id AND state = 'waiting';
    DELETE FROM jobq_job_deps WHERE job_id = v_id;
  END IF;
  DO LAST_INSERT_ID(v_id);
  SELECT v_id AS id;
END
