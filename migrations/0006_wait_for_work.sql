-- jobq schema 6: a server-side wait for work, so an idle worker costs one statement per poll interval
-- yet starts a newly inserted job within a fraction of a second.
--
-- jobq: one statement
--
-- An idle worker CALLs this with its token, the probe it would otherwise send (the indexed, non-locking
-- `SELECT 1 … LIMIT 1` on the claim index, built by the worker from its validated queue and kind names),
-- how long to wait and how often to probe. The procedure refreshes the worker's heartbeat, then runs the
-- probe every p_every_ms until a job is due or the time is up, and returns 1 or 0. The worker probes
-- often (every 2 ms) right after it ran out of work, when more is likely to come soon, and rarely (every
-- 100 ms) once it has been idle a while. Statements inside a stored procedure do not
-- count as client statements (`Questions`), and each sees its own NOW(6), so a job inserted during the
-- wait is seen on the next probe.
--
-- SQL SECURITY INVOKER: the probe text comes from the caller, so it must run with the caller's rights,
-- never the definer's. CREATE PROCEDURE IF NOT EXISTS needs MariaDB 10.1.3+ or MySQL 8.0.29+.
CREATE PROCEDURE IF NOT EXISTS jobq_wait_for_work(
  IN p_token VARCHAR(191) CHARACTER SET ascii,
  IN p_probe TEXT,
  IN p_wait_ms INT,
  IN p_every_ms INT
)
SQL SECURITY INVOKER
BEGIN
  DECLARE v_polls INT DEFAULT 0;
  DECLARE v_every_ms INT DEFAULT GREATEST(1, p_every_ms);
  DECLARE v_max_polls INT DEFAULT GREATEST(1, CEIL(p_wait_ms / GREATEST(1, p_every_ms)));
  UPDATE jobq_processes SET heartbeat_at = NOW(6) WHERE token = p_token;
  SET @jobq_due = 0;
  SET @jobq_probe = p_probe;
  PREPARE jobq_probe_stmt FROM @jobq_probe;
  probe: LOOP
    EXECUTE jobq_probe_stmt;
    SET v_polls = v_polls + 1;
    IF @jobq_due > 0 OR v_polls >= v_max_polls THEN
      LEAVE probe;
    END IF;
    DO SLEEP(v_every_ms / 1000);
  END LOOP probe;
  DEALLOCATE PREPARE jobq_probe_stmt;
  SELECT @jobq_due AS due;
END
