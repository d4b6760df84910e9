-- jobq schema 36: jobq_progress (schema 23) no longer has MariaDB check the payload, for the reasons
-- schema 35 gives for jobq_finish: a progress report writes none of the payload, and one made invalid
-- while the job ran made every report fail. Otherwise schema 23's procedure.
--
-- jobq: one statement
--
-- MariaDB only (an executable comment; MySQL keeps schema 23's procedure). CREATE OR REPLACE keeps the
-- EXECUTE grants given on the procedure.
/*M! CREATE OR REPLACE PROCEDURE jobq_progress(
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
  SET STATEMENT check_constraint_checks = 0 FOR
  UPDATE job_queue
  SET progress = ROUND(p_percent, 2), progress_message = p_message,
      reported_attempt = p_attempt, reported_at = NOW(6)
  WHERE id = p_id AND claim = p_claim AND attempts = p_attempt AND state = 'running';
  SELECT ROW_COUNT() AS reported;
END */
