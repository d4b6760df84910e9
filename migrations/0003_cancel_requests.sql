-- jobq schema 3: cancelling a running job.
--
-- `jobq jobs cancel ID` on a running job cannot stop it directly: the job runs in some worker process,
-- maybe on another host. It stamps cancel_requested_at instead; the worker running the job reads the
-- requests for the rows it holds (through the claimant index, `claim = ? AND state = 'running'`) with
-- each heartbeat, tells the handler to stop, and finishes the row as cancelled.
--
-- A nullable column at the end of the table is an instant change on MariaDB 10.3+ and MySQL 8.0.12+,
-- however large job_queue is.
ALTER TABLE job_queue ADD COLUMN cancel_requested_at TIMESTAMP(6) NULL DEFAULT NULL
