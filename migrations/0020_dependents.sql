-- jobq schema 20: a job knows whether other jobs wait for it, so that its own finish releases them.
--
-- has_dependents is set (in the enqueue's transaction, with the dependent's edges) on every job another
-- job waits for, and never cleared. The worker's finishes are fenced with `has_dependents = 0`: for the
-- common job, which nothing waits for, the finish is the one statement it always was, and a job whose
-- finish changes fewer rows than it names is finished again with its dependents, in one transaction
-- that also queues (or cancels) the dependents whose last dependency just ended (src/db/finish.rs,
-- src/db/deps.rs). The flag is read under the row's lock by the finish itself, so a dependent added
-- while its dependency runs is seen by that dependency's finish: an enqueue locks the jobs it names
-- before it looks at their states. A reaper's pass remains a safety net (rows written by plain SQL
-- without the flag, a crash between a finish and its dependents).
--
-- Adding a column rebuilds job_queue on MariaDB 10.11, with writes waiting: the table's STORED and
-- indexed virtual columns rule out ALGORITHM=INSTANT and LOCK=NONE (docs/operations.md, "Upgrading");
-- MySQL 8.0.12+ adds it instantly. A duplicate column is taken as already applied. The
-- UPDATE marks the jobs that already have waiting dependents; it reads the pending edges only.
ALTER TABLE job_queue ADD COLUMN has_dependents BOOLEAN NOT NULL DEFAULT FALSE;

UPDATE job_queue j JOIN (SELECT DISTINCT after_id FROM jobq_job_deps) d ON d.after_id = j.id
SET j.has_dependents = TRUE WHERE j.has_dependents = FALSE
