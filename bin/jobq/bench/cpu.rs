//! Where the CPU went during a measurement: this process (the client: jobq or the raw loop), the database
//! server (when it runs on this machine), and everything else (other users of a shared machine), read
//! from /proc. On a 2-core machine the client and the server compete for the same cores, so client CPU
//! per job is part of the cost of a job, and "everything else" says whether a figure was taken under load.

use std::time::Instant;

use serde::Serialize;

/// Clock ticks per second of /proc/*/stat. 100 on every Linux architecture jobq targets (USER_HZ).
const TICKS_PER_SEC: f64 = 100.0;

/// CPU used during one measurement.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuUse {
    /// CPU time of the bench's own process per job, microseconds.
    pub client_us_per_job: f64,
    /// CPU time of the database server per job, microseconds (None when the server is not local).
    pub server_us_per_job: Option<f64>,
    /// Cores kept busy by other processes, on average over the measurement.
    pub other_cores: f64,
}

/// A started measurement.
#[derive(Debug)]
pub(crate) struct CpuMeter {
    t0: Instant,
    own0: u64,
    server: Option<(String, u64)>,
    busy0: u64,
}

impl CpuMeter {
    /// Starts measuring; `server` is the database server's pid when it runs on this machine
    /// ([`server_pid`]).
    pub(crate) fn start(server: Option<&str>) -> Self {
        let server = server.and_then(|pid| proc_ticks(pid).map(|t| (pid.to_string(), t)));
        Self {
            t0: Instant::now(),
            own0: proc_ticks("self").unwrap_or(0),
            server,
            busy0: busy_ticks().unwrap_or(0),
        }
    }

    /// CPU used since start, for `jobs` jobs.
    pub(crate) fn finish(&self, jobs: u64) -> CpuUse {
        let secs = self.t0.elapsed().as_secs_f64().max(1e-6);
        let own = proc_ticks("self").unwrap_or(0).saturating_sub(self.own0);
        let server = self
            .server
            .as_ref()
            .and_then(|(pid, t0)| proc_ticks(pid).map(|t| t.saturating_sub(*t0)));
        let busy = busy_ticks().unwrap_or(0).saturating_sub(self.busy0);
        let other = busy.saturating_sub(own + server.unwrap_or(0));
        let per_job = |ticks: u64| ticks as f64 / TICKS_PER_SEC * 1e6 / jobs.max(1) as f64;
        CpuUse {
            client_us_per_job: per_job(own),
            server_us_per_job: server.map(per_job),
            other_cores: other as f64 / TICKS_PER_SEC / secs,
        }
    }
}

/// The 1-, 5- and 15-minute load averages.
pub(crate) fn loadavg() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|s| s.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// Number of CPUs this process may run on.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU's `model name` (Linux); `None` elsewhere.
pub(crate) fn model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map(|(_, name)| name.trim().to_string())
}

/// utime + stime of a process, in ticks.
fn proc_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; the fields after it are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Busy ticks of all CPUs (user, nice, system, irq, softirq, steal).
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    Some(v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)? + v.get(7).unwrap_or(&0))
}

/// The pid of the database server the bench talks to, when it runs on this machine: the one its
/// `pid_file` names (asked of the server, so that the Galera nodes of `scripts/galera.sh` running beside
/// it are told apart from it), else the one mariadbd or mysqld there is, if there is exactly one.
/// Before, with a Galera cluster running, no server was found at all: its CPU counted as other
/// processes', and a quiet machine read as one under load.
pub(crate) async fn server_pid(pool: &sqlx::MySqlPool) -> Option<String> {
    let file: Option<String> = sqlx::query_scalar("SELECT CAST(@@pid_file AS CHAR)")
        .fetch_one(pool)
        .await
        .ok()
        .flatten();
    let named = file
        .and_then(|f| std::fs::read_to_string(f).ok())
        .map(|p| p.trim().to_string())
        .filter(|p| is_server(p));
    named.or_else(only_server)
}

/// Whether `pid` is a running mariadbd or mysqld.
fn is_server(pid: &str) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    matches!(comm.trim(), "mariadbd" | "mysqld")
}

/// The pid of the one mariadbd or mysqld on this machine, if there is exactly one we can see.
fn only_server() -> Option<String> {
    let mut found = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if is_server(pid) {
            if found.is_some() {
                return None;
            }
            found = Some(pid.to_string());
        }
    }
    found
}
