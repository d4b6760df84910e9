-- jobq schema 2: the registry of live jobq processes (workers, reapers, supervisors, schedulers).
--
-- A process inserts its row before it claims anything, refreshes heartbeat_at while it lives and deletes
-- the row on a clean exit. The row is what the reaper checks a claim token against: connection_id is
-- the claimant's current anchor session (it can change when that session is re-established, while the
-- token stays), server_id and server_epoch tell which server incarnation that id belongs to (connection ids
-- start again from 1 when the server restarts), and host and pid let a reaper on the same host check the
-- process itself. host_id (the kernel's boot id and the pid namespace) says whether a reaper is really on
-- the same host and sees the same pids: two containers can share a host name, and a pid that is dead in
-- one pid namespace may be alive in another.
CREATE TABLE IF NOT EXISTS jobq_processes (
  token          VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  role           ENUM('worker','reaper','supervisor','scheduler')
                   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  host           VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  host_id        VARCHAR(96) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  pid            INT UNSIGNED NOT NULL,
  connection_id  BIGINT UNSIGNED NOT NULL,
  server_id      BIGINT UNSIGNED NOT NULL,
  server_epoch   BIGINT NOT NULL,
  queues         VARCHAR(1024) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  version        VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  started_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  heartbeat_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (token),
  KEY heartbeat (heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
