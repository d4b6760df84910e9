-- jobq schema 42: the index of rows off the common path stops moving when a job succeeds.
--
-- Schema 39's `rare_state (rare_state, finished_at)` was meant to hold no entry for a job that goes
-- queued, running, done. But InnoDB indexes NULL keys like any other: such a job had the entry
-- (NULL, NULL) while queued and running, and its done finish, which sets finished_at, moved it to
-- (NULL, finished_at): a delete-marked entry, a new one and purge's clean-up for every job that ran.
-- Measured with scripts/drain-profile.sh (two worker processes, 100,000 no-op jobs, four alternating
-- pairs, purge included): 84-94 µs of server CPU per job against 100-110, 17,400-19,000 jobs/s against
-- 14,600-16,800.
--
-- rare_at is finished_at in the states of rare_state and NULL in every other, so a row on the common
-- path keys (NULL, NULL) from insert to deletion and its finish writes no entry. What read the index by
-- finished_at (pruning dead and cancelled rows by age, dead jobs per minute, the gauges' newest rows)
-- reads rare_at in the same order.
--
-- VIRTUAL, as schemas 12, 26, 30 and 39: MariaDB 10.11 adds it in place and builds the index without
-- a table rebuild, reads and writes going on. A TIMESTAMP virtual column of a TIMESTAMP column holds the
-- instant, not the session's wall-clock time, so writers in different time zones index the same value
-- (checked on MariaDB 10.11 with sessions at +00:00 and +05:00; not checked on MySQL 8). The
-- index keeps its name, so that a process of schema 41 still running while this applies reads through
-- it (by its first column). Run again, the ADD COLUMN stops at the duplicate column (1060), which the
-- migrator takes as applied, and the index is built again.
ALTER TABLE job_queue
  ADD COLUMN rare_at TIMESTAMP(6)
    AS (IF(state IN ('waiting', 'retry', 'dead', 'cancelled'), finished_at, NULL)) VIRTUAL;

ALTER TABLE job_queue DROP KEY rare_state, ADD KEY rare_state (rare_state, rare_at),
  ALGORITHM = INPLACE, LOCK = NONE;
