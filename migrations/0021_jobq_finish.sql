-- jobq schema 21: a job's done finish that any application can make inside its own transaction.
--
-- jobq: one statement
--
-- `CALL jobq_finish(id, claim, attempt)` ends the job `done` if the row still carries that claim and
-- attempt and is running, and answers with one row, one column: `finished`, 1 when it did, 0 when the
-- claim no longer held (the job was reset and belongs to another attempt: roll back). Called in the
-- same transaction as the application's own writes, the writes and the finish commit together or not
-- at all, so they happen exactly once however the worker dies or loses its claim: the same promise as
-- the library's `JobContext::finish_in`, from any language, because the finish is SQL. It is the
-- worker's own done finish (`statements::FINISH_DONE`) without its `has_dependents` clause: the jobs
-- that wait for this one are released by the worker when its handler answers that the application
-- finished the job, or by the reaper's next pass (src/db/deps.rs).
--
-- SQL SECURITY DEFINER: an application that may only insert jobs needs just `GRANT EXECUTE ON PROCEDURE
-- app.jobq_finish`, and with it can finish only a running job whose claim token it was handed, never
-- change another row. The definer is the account that ran `jobq migrate`; dropping that account breaks
-- the procedure (error 1449 names the missing definer); recreate it under another account with
-- `DROP PROCEDURE jobq_finish`, then `DELETE FROM jobq_schema_migrations WHERE version IN (21, 35)` and
-- `jobq migrate` (schema 35 replaces this procedure on MariaDB). The claim
-- parameter has the column's own character set and collation: a parameter of another collation would
-- make the comparison an error or defeat the primary key lookup. CREATE PROCEDURE IF NOT EXISTS needs
-- MariaDB 10.1.3+ or MySQL 8.0.29+.
CREATE PROCEDURE IF NOT EXISTS jobq_finish(
  IN p_id BIGINT UNSIGNED,
  IN p_claim VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_attempt SMALLINT UNSIGNED
)
MODIFIES SQL DATA
SQL SECURITY DEFINER
BEGIN
  UPDATE job_queue SET state = 'done', claim = NULL, finished_at = NOW(6)
  WHERE id = p_id AND claim = p_claim AND attempts = p_attempt AND state = 'running';
  SELECT ROW_COUNT() AS finished;
END
