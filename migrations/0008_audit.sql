-- jobq schema 8: the operators' audit trail.
--
-- Every change made through `jobq web` (retry, cancel, delete, run now, pause, resume, one job or many)
-- is written here: who (the signed-in user, "token" for a bearer token, "local" when the dashboard
-- runs without credentials on the loopback interface), what, on which target, and how many rows it
-- changed. `jobq prune` leaves it alone: how long to keep an audit trail is the operator's decision.
CREATE TABLE IF NOT EXISTS jobq_audit (
  id        BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  at        TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  actor     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  action    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  target    VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  affected  BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  KEY at (at)
) ENGINE = InnoDB;
