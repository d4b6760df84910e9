-- jobq schema 13: how many workers supervisors keep, changed while they run (`jobq scale`), as DBMS_JOB's
-- job_queue_processes could be.
--
-- A row for host '' applies to every supervisor; a row for a host name (as the claim token spells it:
-- ASCII letters, digits, `.`, `-`, `_`) applies to that host's supervisors and wins over ''. Without a row a
-- supervisor keeps the number it was started with (`-n`). Supervisors read it every few seconds: one
-- primary-key lookup of at most two rows.
CREATE TABLE IF NOT EXISTS jobq_scale (
  host     VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  workers  INT UNSIGNED NOT NULL,
  set_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  set_by   VARCHAR(255) NOT NULL DEFAULT '',
  PRIMARY KEY (host)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
