-- jobq schema 37: jobq_output (schema 24) no longer has MariaDB check the payload, for the reasons
-- schema 35 gives for jobq_finish: recording an output writes none of the payload (the output is
-- checked by the procedure itself, as before), and a payload made invalid while the job ran made every
-- output fail. Otherwise schema 24's procedure.
--
-- jobq: one statement
--
-- MariaDB only (an executable comment; MySQL keeps schema 24's procedure). CREATE OR REPLACE keeps the
-- EXECUTE grants given on the procedure.
/*M! CREATE OR REPLACE PROCEDURE jobq_output(
  IN p_id BIGINT UNSIGNED,
  IN p_claim VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_attempt SMALLINT UNSIGNED,
  IN p_output MEDIUMTEXT CHARACTER SET utf8mb4
)
MODIFIES SQL DATA
SQL SECURITY DEFINER
BEGIN
  IF p_output IS NULL OR NOT JSON_VALID(p_output) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'jobq_output: the output is not JSON';
  END IF;
  IF LENGTH(p_output) > 65536 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'jobq_output: the output is longer than 64 KiB (65536 bytes)';
  END IF;
  SET STATEMENT check_constraint_checks = 0 FOR
  UPDATE job_queue
  SET output = p_output, reported_attempt = p_attempt, reported_at = NOW(6)
  WHERE id = p_id AND claim = p_claim AND attempts = p_attempt AND state = 'running';
  SELECT ROW_COUNT() AS recorded;
END */
