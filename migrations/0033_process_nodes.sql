-- jobq schema 33: the Galera node each registered process's anchor session is on (`@@wsrep_node_name`;
-- NULL away from a cluster), written when it registers and with every heartbeat, so that a process that
-- moved to another node shows the new one.
--
-- Workers on a cluster cut the due rows into one slice per node that live workers are on and pick from
-- their own node's slice first (src/worker/slices.rs): claims on different nodes then stamp different
-- rows, and no longer fail each other's certification. This column is where they learn the nodes.
ALTER TABLE jobq_processes
  ADD COLUMN node VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL DEFAULT NULL;
