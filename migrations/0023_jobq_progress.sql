-- jobq schema 23: a running job's progress, reported from SQL by any application or SQL handler.
--
-- jobq: one statement
--
-- `CALL jobq_progress(id, claim, attempt, percent, message)` records that job `id` is `percent` (0 to
-- 100) done, with a short message (up to 255 characters, or NULL), if the row still carries that claim
-- and attempt and is running; it answers with one row, `reported`, 1 when it did, 0 when the claim no
-- longer held. A percent outside 0 to 100 is refused with an error naming it. Like jobq_finish (schema
-- 21), SQL SECURITY DEFINER: `GRANT EXECUTE ON PROCEDURE app.jobq_progress` lets an application report
-- on the jobs whose claim it was handed, and change nothing else. Throttling is the caller's: a report
-- is one primary key update, so a job reporting every second costs the server nothing it notices, but a
-- loop reporting every row does.
CREATE PROCEDURE IF NOT EXISTS jobq_progress(
  IN p_id BIGINT UNSIGNED,
  IN p_claim VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_attempt SMALLINT UNSIGNED,
  IN p_percent DOUBLE,
  IN p_message VARCHAR(255) CHARACTER SET utf8mb4
)
MODIFIES SQL DATA
SQL SECURITY DEFINER
BEGIN
  IF p_percent IS NULL OR p_percent < 0 OR p_percent > 100 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'jobq_progress: percent must be between 0 and 100';
  END IF;
  UPDATE job_queue
  SET progress = ROUND(p_percent, 2), progress_message = p_message,
      reported_attempt = p_attempt, reported_at = NOW(6)
  WHERE id = p_id AND claim = p_claim AND attempts = p_attempt AND state = 'running';
  SELECT ROW_COUNT() AS reported;
END
