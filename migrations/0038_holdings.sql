-- jobq schema 38: the holdings ledger, one row per registered claimant listing every job row it may
-- be running.
--
-- Each claim's stamping UPDATE joins the claimant's row and writes the list in the same statement (no
-- round trip is added): the jobs the worker still runs, plus the rows it stamps. A row therefore never
-- runs under a token without being on that token's list, since both commit together; rows finished
-- since drop off at the next claim, so a list may name rows that no longer run, never the reverse. A
-- stamp whose claimant has no row here stamps nothing (the claim then makes the row and stamps again).
-- The row is made when the process registers (src/db/registry.rs) and removed with its registry row
-- once nothing on it runs; a reaper that resets a claimant's rows empties its list.
--
-- Why: the claimant's running rows are what reapers, limits and gauges ask for, and answering from an
-- index on (state, claim) costs every job two more index entries to move. This table is how jobq reads
-- them without that index (docs/performance.md). Processes registered before this schema have no row
-- and are registered again when they restart; their running rows are found as before.
CREATE TABLE IF NOT EXISTS jobq_holdings (
  holder    VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  held_ids  MEDIUMTEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  PRIMARY KEY (holder)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
