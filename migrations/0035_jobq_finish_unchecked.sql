-- jobq schema 35: jobq_finish (schema 21) no longer has MariaDB check the payload.
--
-- jobq: one statement
--
-- MariaDB checks a row's CHECK constraints on every UPDATE of it, whatever the UPDATE sets, so the
-- application's finish parsed the whole payload again, and a payload made invalid while the job ran made
-- the finish fail (error 4025) and the application's transaction with it. The finish writes none of the
-- payload; like the worker's own finishes (`statements::unchecked!`) it now runs with the check off for
-- that one statement. Otherwise the procedure is schema 21's: same parameters, same answer.
--
-- MariaDB only, in an executable comment: MySQL's JSON type is checked when written, not on every
-- UPDATE, so MySQL keeps schema 21's procedure and reads this statement as an empty one (the migrator
-- counts that as applied). CREATE OR REPLACE keeps the EXECUTE grants given on the procedure (measured
-- on MariaDB 10.11: `mysql.procs_priv` unchanged); the definer becomes the account running `jobq
-- migrate`, as when schema 21 created it.
/*M! CREATE OR REPLACE PROCEDURE jobq_finish(
  IN p_id BIGINT UNSIGNED,
  IN p_claim VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_attempt SMALLINT UNSIGNED
)
MODIFIES SQL DATA
SQL SECURITY DEFINER
BEGIN
  SET STATEMENT check_constraint_checks = 0 FOR
  UPDATE job_queue SET state = 'done', claim = NULL, finished_at = NOW(6)
  WHERE id = p_id AND claim = p_claim AND attempts = p_attempt AND state = 'running';
  SELECT ROW_COUNT() AS finished;
END */
