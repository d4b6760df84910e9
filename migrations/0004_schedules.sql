-- jobq schema 4: schedules, the definitions the scheduler turns into jobs.
--
-- * name is unique: schedules are upserted by name (from jobq.toml, the CLI or code), so syncing a
--   config file twice never makes a second schedule.
-- * spec is the text as written (a cron expression, `every 5m`, `daily at 02:30`, `once at ...`) and
--   time_zone an IANA name; jobq parses them, the database only keeps them.
-- * anchor_at fixes the phase of `every` specs (planned times are anchor_at + k * interval), so interval
--   runs never drift with how late or long each run was.
-- * next_run_at is the next planned time. It is the exactly-once guard: a scheduler advances it with
--   `UPDATE ... WHERE id = ? AND next_run_at = <the value it read>` in the same transaction as the jobs it
--   creates, so of any number of schedulers that read the same due row, one advances it and creates the
--   jobs and the others change nothing. (jobq_schedule_runs' unique key is the second guard.)
-- * due (state, next_run_at) is the tick's query, `state = 'enabled' AND next_run_at <= ?`: one range.
-- * Times are TIMESTAMP(6) like job_queue's (instants, whatever the session time zone), each with an
--   explicit default: without one, a server running with explicit_defaults_for_timestamp = OFF (MariaDB
--   before 10.10) gives the first TIMESTAMP NOT NULL column ON UPDATE CURRENT_TIMESTAMP.
-- * Identifier and enum columns are ascii_bin, like job_queue's (see 0001 for why).
CREATE TABLE IF NOT EXISTS jobq_schedules (
  id                   BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  name                 VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  kind                 VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  payload              JSON NOT NULL DEFAULT ('{}'),
  queue                VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'default',
  priority             SMALLINT NOT NULL DEFAULT 0,
  max_attempts         SMALLINT UNSIGNED NULL DEFAULT NULL,
  timeout_secs         INT UNSIGNED NULL DEFAULT NULL,
  spec                 VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  time_zone            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'UTC',
  anchor_at            TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  start_at             TIMESTAMP(6) NULL DEFAULT NULL,
  end_at               TIMESTAMP(6) NULL DEFAULT NULL,
  at_startup           BOOLEAN NOT NULL DEFAULT FALSE,
  overlap              ENUM('wait','skip','allow') CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'wait',
  on_error             ENUM('retry','keep','pause') CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'retry',
  misfire              ENUM('once','all','skip') CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'once',
  jitter_ms            INT UNSIGNED NOT NULL DEFAULT 0,
  broken_after         INT UNSIGNED NOT NULL DEFAULT 16,
  state                ENUM('enabled','paused','finished','broken')
                         CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'enabled',
  next_run_at          TIMESTAMP(6) NULL DEFAULT NULL,
  last_run_at          TIMESTAMP(6) NULL DEFAULT NULL,
  consecutive_failures INT UNSIGNED NOT NULL DEFAULT 0,
  total_runs           BIGINT UNSIGNED NOT NULL DEFAULT 0,
  total_failures       BIGINT UNSIGNED NOT NULL DEFAULT 0,
  skipped_runs         BIGINT UNSIGNED NOT NULL DEFAULT 0,
  last_error           TEXT NULL,
  created_at           TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at           TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY name (name),
  KEY due (state, next_run_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
