-- jobq schema 15: queues pinned to hosts, as DBMS_JOB's instance affinity. A queue with rows here is
-- served only by workers on the hosts they name (host names as the claim token spells them); a queue
-- without any is served everywhere. Workers read this table with the limits (at most once a second,
-- and only while they claim) and leave a queue pinned elsewhere out of their claims and idle waits.
CREATE TABLE IF NOT EXISTS jobq_queue_hosts (
  queue   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  host    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  set_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  set_by  VARCHAR(255) NOT NULL DEFAULT '',
  PRIMARY KEY (queue, host)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
