-- jobq schema 24: the output a job leaves, recorded from SQL by any application or SQL handler.
--
-- jobq: one statement
--
-- `CALL jobq_output(id, claim, attempt, json)` stores `json` as job `id`'s output if the row still
-- carries that claim and attempt and is running; it answers with one row, `recorded`, 1 when it did, 0
-- when the claim no longer held. Text that is not JSON, or longer than 64 KiB (65,536 bytes), is
-- refused with an error saying which. The output stays on the row after the job ends, until the row is
-- pruned. SQL SECURITY DEFINER, as jobq_finish (schema 21).
CREATE PROCEDURE IF NOT EXISTS jobq_output(
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
  UPDATE job_queue
  SET output = p_output, reported_attempt = p_attempt, reported_at = NOW(6)
  WHERE id = p_id AND claim = p_claim AND attempts = p_attempt AND state = 'running';
  SELECT ROW_COUNT() AS recorded;
END
