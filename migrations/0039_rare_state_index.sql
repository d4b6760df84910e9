-- jobq schema 39: the rows off a job's common path (waiting, retry, dead, cancelled) get an index of their
-- own, rare_state (rare_state, finished_at), on a virtual column that is NULL for queued, running and done.
--
-- A job that runs and succeeds goes queued, running, done and never has an entry in it; the index moves
-- only when a job waits for others, fails, dies or is cancelled. What reads those rows (the dependency
-- sweep and `jobq stats`' long waits, the dashboard's and the gauges' counts of each state, pruning dead
-- and cancelled jobs by age, a text search of last_error in one of those states) reads this index instead
-- of `state_claim (state, claim, finished_at)`, the index every claim and every finish moves an entry
-- in, which the schema's next versions drop (docs/performance.md: running rows are found through the
-- claimants' holdings lists since schema 38).
--
-- VIRTUAL, as schemas 12, 26 and 30: MariaDB 10.11 adds the column and builds its index in place,
-- without a table rebuild. Run again, each statement stops at the duplicate column (1060) or key name
-- (1061), which the migrator takes as applied.
ALTER TABLE job_queue
  ADD COLUMN rare_state VARCHAR(9) CHARACTER SET ascii COLLATE ascii_bin
    AS (IF(state IN ('waiting', 'retry', 'dead', 'cancelled'), state, NULL)) VIRTUAL;

ALTER TABLE job_queue ADD KEY rare_state (rare_state, finished_at);
