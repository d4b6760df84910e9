//! The MySQL and MariaDB server error numbers jobq reacts to, and what they mean to it: the one place
//! where error numbers are written down and read out of a [`sqlx::Error`].
//!
//! A leaf at the crate root that imports nothing from the rest of the crate, so both [`crate::error::Error`]
//! (asking whether an error is transient) and `db` (which returns `Error`s) can use it without a circle.

/// `ER_DUP_FIELDNAME`: a column of that name exists (a migration's DDL ran before).
pub(crate) const DUP_FIELDNAME: u16 = 1060;
/// `ER_DUP_KEYNAME`: an index of that name exists (a migration's DDL ran before).
pub(crate) const DUP_KEYNAME: u16 = 1061;
/// `ER_CANT_DROP_FIELD_OR_KEY`: the column or index to drop is not there (a migration's DDL ran before).
pub(crate) const CANT_DROP_FIELD_OR_KEY: u16 = 1091;
/// `ER_DUP_ENTRY`: a unique key already holds the value. Rolls back only the statement, not the
/// transaction.
pub(crate) const DUP_ENTRY: u16 = 1062;
/// `ER_EMPTY_QUERY`: the statement was all comment (MySQL, sent a MariaDB-only migration).
pub(crate) const EMPTY_QUERY: u16 = 1065;
/// `ER_LOCK_WAIT_TIMEOUT`.
pub(crate) const LOCK_WAIT_TIMEOUT: u16 = 1205;
/// `ER_LOCK_DEADLOCK`.
pub(crate) const DEADLOCK: u16 = 1213;
/// `ER_SERVER_SHUTDOWN`: the server is going down.
pub(crate) const SERVER_SHUTDOWN: u16 = 1053;
/// `ER_CONNECTION_KILLED` (MariaDB): our statement was killed.
pub(crate) const CONNECTION_KILLED: u16 = 1927;
/// `ER_QUERY_INTERRUPTED`: our statement was killed.
pub(crate) const QUERY_INTERRUPTED: u16 = 1317;
/// `ER_ACCESS_DENIED_ERROR`.
pub(crate) const ACCESS_DENIED: u16 = 1045;
/// `ER_ACCESS_DENIED_NO_PASSWORD_ERROR`: e.g. root that may only log in through the unix socket.
pub(crate) const ACCESS_DENIED_NO_PASSWORD: u16 = 1698;
/// `ER_CON_COUNT_ERROR`: the server has `max_connections` clients already.
pub(crate) const TOO_MANY_CONNECTIONS: u16 = 1040;
/// `ER_SECURE_TRANSPORT_REQUIRED` (MySQL 5.7+): a plaintext connection under
/// `require_secure_transport=ON`. MariaDB answers [`ACCESS_DENIED`] instead.
pub(crate) const SECURE_TRANSPORT_REQUIRED: u16 = 3159;
/// `ER_BAD_DB_ERROR`: unknown database.
pub(crate) const BAD_DB: u16 = 1049;
/// `ER_NO_SUCH_TABLE`.
pub(crate) const NO_SUCH_TABLE: u16 = 1146;
/// `ER_OPTION_PREVENTS_STATEMENT`: "running with the --read-only option" (also used for other
/// options, so the message is checked too; see [`is_read_only`]).
pub(crate) const OPTION_PREVENTS_STATEMENT: u16 = 1290;
/// `ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION`.
pub(crate) const READ_ONLY_TRANSACTION: u16 = 1792;
/// `ER_READ_ONLY_MODE` (MySQL's `super_read_only`/InnoDB read-only mode).
pub(crate) const READ_ONLY_MODE: u16 = 1836;
/// ER_UNKNOWN_COM_ERROR, which a Galera node outside the Primary component (cut off from the rest of
/// its cluster) gives for every statement that touches a table: "WSREP has not yet prepared node for
/// application use". Until it rejoins, only another node can serve.
pub(crate) const WSREP_NOT_READY: u16 = 1047;
/// ER_ERROR_DURING_COMMIT. A Galera node that leaves the Primary component in the middle of a statement
/// fails it with this ("Error while appending streaming replication fragment (provider status: Not
/// connected to Primary Component)", measured on 10.11): as [`WSREP_NOT_READY`], only another node can
/// serve. Other causes of 1180 are failed commits too, which jobq's statements (all fenced) may retry.
pub(crate) const ERROR_DURING_COMMIT: u16 = 1180;
/// `ER_CONSTRAINT_FAILED` (MariaDB): a CHECK constraint refused the row. MariaDB checks every CHECK of
/// a row on every UPDATE of it, whatever columns the UPDATE sets (measured on 10.11), so a row written
/// past a check (`check_constraint_checks = 0`) refuses every later change. MySQL's number is 3819.
pub(crate) const CONSTRAINT_FAILED: u16 = 4025;

/// The server error number of a database error, if it is one.
pub(crate) fn number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .map(|m| m.number())
}

/// The server's message of a database error, else the error's own text.
pub(crate) fn message(e: &sqlx::Error) -> String {
    e.as_database_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

/// True when a unique key refused the row ([`DUP_ENTRY`]).
pub(crate) fn is_duplicate_entry(e: &sqlx::Error) -> bool {
    number(e) == Some(DUP_ENTRY)
}

/// True for a lock conflict with another transaction (deadlock, lock-wait timeout): the connection is
/// fine, only the transaction has to be tried again.
pub(crate) fn is_lock_conflict(e: &sqlx::Error) -> bool {
    matches!(number(e), Some(DEADLOCK | LOCK_WAIT_TIMEOUT))
}

/// True unless `e` proves that the transaction it ended did not commit. Only a lock conflict does (the
/// server rolled the transaction back; on Galera a failed certification is one everywhere). A lost
/// connection after COMMIT was sent may have committed, and so may a Galera node that left the Primary
/// component while the COMMIT was being replicated: it answers [`WSREP_NOT_READY`] or
/// [`ERROR_DURING_COMMIT`] while the write-set, delivered before it left, commits on the other nodes.
pub(crate) fn may_have_committed(e: &sqlx::Error) -> bool {
    !is_lock_conflict(e)
}

/// True for the errors a server gives once it is read-only: seen on the old primary after a failover,
/// while a proxy or DNS already points new connections at the new one. The statement is worth trying
/// again on a new connection, never on this one: see [`crate::db::failover`].
pub(crate) fn is_read_only(e: &sqlx::Error) -> bool {
    match number(e) {
        Some(READ_ONLY_TRANSACTION | READ_ONLY_MODE) => true,
        Some(OPTION_PREVENTS_STATEMENT) => {
            let m = message(e).to_ascii_lowercase();
            m.contains("read-only") || m.contains("read_only")
        }
        _ => false,
    }
}

/// True when the server behind the connection cannot serve for now and another might: read-only
/// (after a failover) or a Galera node outside the Primary component. Connections opened before such an
/// error are not used again ([`crate::db::failover`]).
pub(crate) fn is_node_unusable(e: &sqlx::Error) -> bool {
    matches!(number(e), Some(WSREP_NOT_READY | ERROR_DURING_COMMIT)) || is_read_only(e)
}

/// What kind of transient failure `e` is, as a metric label: `deadlock`, `lock_wait`, `read_only` or
/// `connection` (a lost, refused or killed connection, a server shutting down).
pub(crate) fn transient_kind(e: &sqlx::Error) -> &'static str {
    match number(e) {
        Some(DEADLOCK) => "deadlock",
        Some(LOCK_WAIT_TIMEOUT) => "lock_wait",
        Some(WSREP_NOT_READY | ERROR_DURING_COMMIT) => "node_not_ready",
        _ if is_read_only(e) => "read_only",
        _ => "connection",
    }
}

/// True for a driver error worth retrying as it is: deadlocks, lock-wait timeouts, lost connections
/// a read-only server (after a failover; the retry gets a new connection) and a Galera node cut off
/// from its cluster. What jobq retries
/// internally, for programs that run their own statements beside jobq's.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(_) => {
            matches!(
                number(e),
                Some(
                    DEADLOCK
                        | LOCK_WAIT_TIMEOUT
                        | SERVER_SHUTDOWN
                        | CONNECTION_KILLED
                        | QUERY_INTERRUPTED
                        | TOO_MANY_CONNECTIONS
                )
            ) || is_node_unusable(e)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_without_a_server_number_are_told_apart_by_kind() {
        let lost = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(is_transient(&lost));
        assert!(is_transient(&sqlx::Error::PoolTimedOut));
        assert!(!is_transient(&sqlx::Error::RowNotFound));
        assert_eq!(number(&lost), None);
        assert!(
            may_have_committed(&lost),
            "a lost reply says nothing of the COMMIT"
        );
        assert!(!is_duplicate_entry(&lost) && !is_lock_conflict(&lost) && !is_read_only(&lost));
        assert_eq!(
            message(&sqlx::Error::RowNotFound),
            sqlx::Error::RowNotFound.to_string()
        );
    }
}
