//! Workers on many hosts, on one machine: each host is a network namespace with a pid namespace and a
//! host name of its own (so its processes see neither the other hosts' pids nor their names), created
//! by the test and removed when it ends, and runs `jobq supervise --reaper`: a supervisor, its workers
//! and one reaper per host. The database server listens on 127.0.0.1 only; each host reaches it through
//! a veth pair and a TCP relay in this process, so a host's dead processes close their sessions as a
//! dead host's kernel would.
//!
//! These tests need root (`ip netns`, `unshare`); elsewhere they print SKIPPED and pass.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jobq::{ReaperConfig, WorkerConfig};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::net::{TcpListener, TcpStream};

use crate::common::{TestDb, jobq_bin, wait_until, write_config};
use crate::history::{self, At, Expectations, History, assert_clean};

/// Command jobs that record their copies ([`history::recorded_command`], a lock file per job held by
/// the shell and its `sleep`: a second copy at once records `lock-taken`), the host in each copy's
/// claim. `even` takes 3 s everywhere; `slow` takes 3 s except on `hostB`, where it outlasts the test,
/// so that host B dies holding running jobs; `hold` runs until the test creates `dir/release`.
fn config(dir: &Path) -> PathBuf {
    let handler = |kind: &str, wait: &str| {
        let script = history::recorded_command(
            &dir.join("effects"),
            &dir.join("lock.$JOBQ_JOB_ID"),
            &format!("host=${{JOBQ_CLAIM%%:*}}\n{wait}"),
        );
        history::command_handler(kind, &script)
    };
    let release = dir.join("release");
    write_config(
        dir,
        &[
            handler("even", "sleep 3"),
            handler(
                "slow",
                "sleep $(if [ $host = hostB ]; then echo 600; else echo 3; fi)",
            ),
            handler(
                "hold",
                &format!("while [ ! -e {} ]; do sleep 0.2; done", release.display()),
            ),
        ]
        .concat(),
    )
}

/// The recorded copies as `start:JOB:HOST` and `end:JOB:HOST` lines (`OVERLAP:JOB` for a copy that
/// found its job's lock taken), the host read from the copy's claim.
fn effects(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("effects")).unwrap_or_default();
    let mut out = String::new();
    for line in text.lines() {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_default()
        };
        let host = field("claim").split(':').next().unwrap_or_default();
        match line.split(' ').next().unwrap_or_default() {
            "lock-taken" => out.push_str(&format!("OVERLAP:{}\n", field("job"))),
            what => out.push_str(&format!("{what}:{}:{host}\n", field("job"))),
        }
    }
    out
}

/// Whether this machine lets the test make hosts: root, `ip` and `unshare`.
fn can_make_hosts() -> bool {
    let ok = |cmd: &mut Command| {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    ok(Command::new("ip").args(["netns", "list"]))
        && ok(Command::new("unshare").args([
            "--net",
            "--uts",
            "--pid",
            "--fork",
            "--mount-proc",
            "true",
        ]))
}

/// Runs `ip ARGS`, panicking with its message on failure.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Processes in network namespace `ns`, as (pid here, pid in the innermost pid namespace).
fn ns_pids(ns: &str) -> Vec<(i32, i32)> {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let inner = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))?
                .split_whitespace()
                .last()?
                .parse()
                .ok()?;
            Some((pid, inner))
        })
        .collect()
}

/// Removes hosts left by test processes that no longer exist (a test binary killed mid-run).
fn sweep_leftover_hosts() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(ns) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = ns
            .strip_prefix("jobq-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            for (p, _) in ns_pids(ns) {
                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Serializes picking a free /24 and taking it, between the tests of this process.
static SUBNETS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A /24 in 10.213.0.0/16 that no address of this namespace is in, starting at one that depends on
/// this process, so that concurrent test processes rarely even look at the same ones. Returns its
/// first address, the host's outside end.
fn free_subnet() -> Ipv4Addr {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .expect("ip addr");
    let used: HashSet<[u8; 3]> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.split('/').next()?.parse::<Ipv4Addr>().ok())
        .map(|a| {
            let o = a.octets();
            [o[0], o[1], o[2]]
        })
        .collect();
    let start = (std::process::id() % 256) as usize;
    (0..256usize)
        .map(|i| ((start + i) % 256) as u8)
        .find(|x| !used.contains(&[10, 213, *x]))
        .map(|x| Ipv4Addr::new(10, 213, x, 1))
        .expect("a free 10.213.x.0/24")
}

/// One host: a network namespace reached over a veth pair, with `ip netns exec … unshare --uts --pid`
/// running the host's supervisor as pid 1 of its own pid namespace. Dropping it kills everything in
/// the namespace and removes it, also when the test panics.
struct Host {
    ns: String,
    /// The host name its processes see and stamp into their claim tokens.
    name: String,
    child: Option<Child>,
    log: PathBuf,
    relay: Option<tokio::task::JoinHandle<()>>,
}

impl Host {
    /// Makes the namespace, its link and relay, and starts `jobq supervise --reaper --config CFG ARGS`
    /// in it under host name `name`. `burn` processes are started and ended first, which moves the
    /// host's pids past the other hosts'.
    fn start(db: &TestDb, tag: char, name: &str, burn: u32, cfg: &Path, args: &[&str]) -> Host {
        let ns = format!("jobq-{}-{tag}", std::process::id());
        ip(&["netns", "add", &ns]);
        let mut host = Host {
            ns: ns.clone(),
            name: name.to_string(),
            child: None,
            log: cfg.with_file_name(format!("host-{name}-{tag}.log")),
            relay: None,
        };
        let outside = {
            let _taking = SUBNETS.lock().unwrap_or_else(|e| e.into_inner());
            let outside = free_subnet();
            let o = outside.octets();
            let inside = Ipv4Addr::new(o[0], o[1], o[2], 2);
            let veth = format!("jq{}{tag}", std::process::id());
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip(&["addr", "add", &format!("{outside}/24"), "dev", &veth]);
            ip(&["link", "set", &veth, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{inside}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            outside
        };
        let (scheme_user, rest) = db.url.split_once('@').expect("URL has a user part");
        let (server, database) = rest.split_once('/').expect("URL has a database part");
        let server = if server.contains(':') {
            server.to_string()
        } else {
            format!("{server}:3306")
        };
        let listener = std::net::TcpListener::bind((outside, 0)).unwrap();
        let url = format!(
            "{scheme_user}@{outside}:{}/{database}",
            listener.local_addr().unwrap().port()
        );
        listener.set_nonblocking(true).unwrap();
        host.relay = Some(tokio::spawn(relay(
            TcpListener::from_std(listener).unwrap(),
            server,
        )));
        let log = std::fs::File::create(&host.log).unwrap();
        let script = "hostname \"$1\" || exit 1\n\
                      i=0; while [ $i -lt \"$2\" ]; do /bin/sh -c :; i=$((i+1)); done\n\
                      shift 2; exec \"$@\"";
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "unshare", "--uts", "--pid", "--fork"])
            .args(["--mount-proc", "--kill-child=SIGKILL", "sh", "-c", script])
            .args(["sh", name, &burn.to_string()])
            .arg(jobq_bin())
            .args(["supervise", "--reaper", "--config", cfg.to_str().unwrap()])
            .args(args)
            .env("JOBQ_DATABASE_URL", url)
            .env_remove("DATABASE_URL")
            .env_remove("JOBQ_CONFIG")
            .env_remove("JOBQ_DATABASE_SSL_MODE")
            .env_remove("JOBQ_DATABASE_SSL_CA")
            .env_remove("JOBQ_LOG")
            .env_remove("JOBQ_LOG_FORMAT")
            .current_dir(cfg.parent().unwrap())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("ip netns exec");
        host.child = Some(child);
        host
    }

    /// What its processes register as their `host_id`: the boot id and their pid namespace.
    fn host_id(&self) -> String {
        let init = self
            .pids()
            .into_iter()
            .find(|(_, inner)| *inner == 1)
            .expect("the host's pid 1")
            .0;
        let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
        let ns: String = ns
            .to_string_lossy()
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        format!("{}/{ns}", boot.trim())
    }

    /// Its processes, as (pid here, pid on the host).
    fn pids(&self) -> Vec<(i32, i32)> {
        ns_pids(&self.ns)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The host dies: SIGKILL to its pid 1 takes every process of its pid namespace with it (the
    /// supervisor, its reaper, the workers and their commands). Returns once none is left.
    async fn die(&mut self) {
        let init = self
            .pids()
            .into_iter()
            .find(|(_, inner)| *inner == 1)
            .expect("the host's pid 1")
            .0;
        kill(Pid::from_raw(init), Signal::SIGKILL).unwrap();
        let mut child = self.child.take().expect("running");
        tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
        let ns = self.ns.clone();
        wait_until("the host's processes gone", Duration::from_secs(10), || {
            let ns = ns.clone();
            async move { ns_pids(&ns).is_empty() }
        })
        .await;
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for (pid, _) in self.pids() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Removes the veth pair with it.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        if let Some(r) = self.relay.take() {
            r.abort();
        }
        eprintln!("log of {} ({}): {}", self.name, self.ns, self.log.display());
    }
}

/// Forwards every connection to `server`. When a host's process dies its kernel closes the socket; the
/// relay then closes its side to the server, which ends the session, as with a real host.
async fn relay(listener: TcpListener, server: String) {
    while let Ok((mut down, _)) = listener.accept().await {
        let server = server.clone();
        tokio::spawn(async move {
            if let Ok(mut up) = TcpStream::connect(&server).await {
                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
            }
        });
    }
}

/// A registry row.
#[derive(Debug, Clone)]
struct Proc {
    token: String,
    role: String,
    host: String,
    host_id: String,
    pid: i32,
}

async fn registry(db: &TestDb) -> Vec<Proc> {
    let rows: Vec<(String, String, String, String, u32)> = sqlx::query_as(
        "SELECT CAST(token AS CHAR), CAST(role AS CHAR), CAST(host AS CHAR), \
         CAST(host_id AS CHAR), pid FROM jobq_processes",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(token, role, host, host_id, pid)| Proc {
            token,
            role,
            host,
            host_id,
            pid: pid as i32,
        })
        .collect()
}

/// Waits until `workers` workers and `reapers` reapers are registered, and returns the registry.
async fn registered(db: &TestDb, workers: usize, reapers: usize) -> Vec<Proc> {
    wait_until("every host registered", Duration::from_secs(30), || async {
        let r = registry(db).await;
        r.iter().filter(|p| p.role == "worker").count() == workers
            && r.iter().filter(|p| p.role == "reaper").count() == reapers
    })
    .await;
    registry(db).await
}

/// Running rows as (id, claim).
async fn running(db: &TestDb) -> Vec<(u64, String)> {
    sqlx::query_as(
        "SELECT id, CAST(claim AS CHAR) FROM job_queue WHERE state = 'running' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Two hosts drain a queue together, each with its own reaper judging only its own host's pids: while
/// both live, no row is ever reset, although host B's workers' pids do not exist on host A (a reaper
/// probing them there would find them dead). Then host B dies whole, SIGKILLed with jobs running: host
/// A's reaper takes them back no sooner than B's fence plus the margin after B's last heartbeat, within
/// the documented bound, and every job ends exactly once with no two copies running at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_host_is_rescued_by_another_hosts_reaper_and_a_live_one_is_left_alone() {
    if !can_make_hosts() {
        eprintln!("SKIPPED: cannot make network and pid namespaces here (needs root, ip, unshare)");
        return;
    }
    sweep_leftover_hosts();
    let db = TestDb::new().await;
    let dir = crate::common::scratch_dir();
    let cfg = config(&dir);
    let workers = ["-n", "2", "-c", "2"];
    let a = Host::start(&db, 'a', "hostA", 0, &cfg, &workers);
    let mut b = Host::start(&db, 'b', "hostB", 300, &cfg, &workers);

    let procs = registered(&db, 4, 2).await;
    let host_ids = |host: &str| -> HashSet<String> {
        procs
            .iter()
            .filter(|p| p.host == host)
            .map(|p| p.host_id.clone())
            .collect()
    };
    let (ids_a, ids_b) = (host_ids("hostA"), host_ids("hostB"));
    assert_eq!(ids_a.len(), 1, "{procs:?}");
    assert_eq!(ids_b.len(), 1, "{procs:?}");
    assert_ne!(ids_a, ids_b, "the hosts share a pid namespace: {procs:?}");
    let pids_on_a: HashSet<i32> = a.pids().into_iter().map(|(_, inner)| inner).collect();
    let b_workers: Vec<i32> = procs
        .iter()
        .filter(|p| p.host == "hostB" && p.role == "worker")
        .map(|p| p.pid)
        .collect();
    assert!(
        b_workers.iter().all(|p| !pids_on_a.contains(p)),
        "host B's workers {b_workers:?} have pids that exist on host A {pids_on_a:?}: \
         the scene could not tell a reaper probing them there"
    );

    // Both hosts live: 40 jobs of 3 s over 8 slots keep host B's workers busy for 15 s, more than
    // B's fence, the margin and a reaper interval, while host A's reaper passes every 2 s.
    db.insert_jobs("even", 40).await;
    let began = Instant::now();
    wait_until("40 jobs done", Duration::from_secs(60), || async {
        db.states().await == "done=40"
    })
    .await;
    eprintln!("two live hosts drained 40 jobs in {:?}", began.elapsed());
    let retried: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE attempts <> 1")
        .await;
    assert_eq!(retried, 0, "a job was reset while both hosts lived");
    for h in [&a, &b] {
        assert!(
            !h.log().contains("released"),
            "{} released rows while every host lived:\n{}",
            h.name,
            h.log()
        );
    }
    let done = effects(&dir);
    for host in ["hostA", "hostB"] {
        assert!(
            done.lines()
                .any(|l| l.starts_with("end:") && l.ends_with(host)),
            "{host} ran no job:\n{done}"
        );
    }

    // Host B dies holding running jobs.
    db.insert_jobs("slow", 8).await;
    wait_until("host B running jobs", Duration::from_secs(20), || async {
        // Nothing queued first, then the running rows: read the other way round, a row claimed
        // between the two reads would be on host B without being checked as started.
        let queued: i64 = db
            .scalar("SELECT COUNT(*) FROM job_queue WHERE state = 'queued'")
            .await;
        let rows = running(&db).await;
        let on_b: Vec<_> = rows.iter().filter(|r| r.1.starts_with("hostB:")).collect();
        let started = effects(&dir);
        queued == 0
            && on_b.len() >= 2
            && on_b
                .iter()
                .all(|(id, _)| started.contains(&format!("start:{id}:hostB\n")))
    })
    .await;
    let on_b: Vec<(u64, String)> = running(&db)
        .await
        .into_iter()
        .filter(|r| r.1.starts_with("hostB:"))
        .collect();
    // The claimants host B's death kills: its workers, read before it dies.
    let b_tokens: Vec<String> = registry(&db)
        .await
        .into_iter()
        .filter(|p| p.host == "hostB" && p.role == "worker")
        .map(|p| p.token)
        .collect();
    let killed = Instant::now();
    b.die().await;
    // No process of host B is left: its copies are gone.
    let gone_at = At::now();
    // No heartbeat can come from host B any more.
    let mut last_beat: HashMap<String, f64> = HashMap::new();
    for (_, claim) in &on_b {
        let beat: f64 = sqlx::query_scalar(
            "SELECT CAST(UNIX_TIMESTAMP(heartbeat_at) AS DOUBLE) FROM jobq_processes WHERE token = ?",
        )
        .bind(claim)
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("registry row of {claim}: {e}"));
        last_beat.insert(claim.clone(), beat);
    }
    let fence_and_margin = WorkerConfig::DEFAULT_FENCE_AFTER + jobq::testing::MARGIN;
    // Machine load (two cores shared with builds) gets 3 s, as in the single-host test.
    let limit = fence_and_margin + ReaperConfig::DEFAULT_INTERVAL + Duration::from_secs(3);
    let mut rescued: HashMap<u64, (Duration, f64)> = HashMap::new();
    while rescued.len() < on_b.len() {
        assert!(
            killed.elapsed() < limit + Duration::from_secs(5),
            "host B's jobs not rescued {:?} after it died; host A's log:\n{}",
            killed.elapsed(),
            a.log()
        );
        let ids: Vec<String> = on_b.iter().map(|(id, _)| id.to_string()).collect();
        let rows: Vec<(u64, Option<String>, f64)> = sqlx::query_as(&format!(
            "SELECT id, CAST(claim AS CHAR), CAST(UNIX_TIMESTAMP(NOW(6)) AS DOUBLE) FROM job_queue \
             WHERE id IN ({})",
            ids.join(",")
        ))
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let since_kill = killed.elapsed();
        for (id, claim, now) in rows {
            let (_, was) = on_b.iter().find(|(i, _)| *i == id).unwrap();
            if claim.as_ref() != Some(was) && !rescued.contains_key(&id) {
                rescued.insert(id, (since_kill, now - last_beat[was]));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let slowest = rescued.values().map(|r| r.0).max().unwrap();
    let after_beat: Vec<f64> = rescued.values().map(|r| r.1).collect();
    let (first_beat, last_beat_s) = (
        after_beat.iter().cloned().fold(f64::MAX, f64::min),
        after_beat.iter().cloned().fold(0.0, f64::max),
    );
    eprintln!(
        "host B SIGKILLed holding {} jobs: host A's reaper rescued them {:.1}-{:.1} s after their \
         claimants' last heartbeats, at most {slowest:.1?} after the kill",
        on_b.len(),
        first_beat,
        last_beat_s,
    );
    assert!(
        first_beat >= fence_and_margin.as_secs_f64(),
        "a row of host B was reset {first_beat:.2} s after its claimant's last heartbeat, before its \
         fence and the margin ({fence_and_margin:?})"
    );
    assert!(
        slowest <= limit,
        "rescued {slowest:?} after the kill (limit {limit:?})"
    );
    let releases: Vec<String> = a
        .log()
        .lines()
        .filter(|l| l.contains("released a dead claimant's job"))
        .map(String::from)
        .collect();
    assert_eq!(releases.len(), on_b.len(), "host A's log:\n{}", a.log());
    assert!(
        releases
            .iter()
            .all(|l| l.contains("hostB:") && l.contains("reaper")),
        "host A's log:\n{}",
        a.log()
    );

    wait_until("every job done", Duration::from_secs(30), || async {
        db.states().await == "done=48"
    })
    .await;
    let out = effects(&dir);
    assert!(!out.contains("OVERLAP"), "two copies ran at once:\n{out}");
    let ends: Vec<&str> = out.lines().filter(|l| l.starts_with("end:")).collect();
    assert_eq!(ends.len(), 48, "{out}");
    let ended: HashSet<&str> = ends.iter().map(|l| l.split(':').nth(1).unwrap()).collect();
    assert_eq!(ended.len(), 48, "a job ended twice:\n{out}");
    for (id, _) in &on_b {
        assert!(out.contains(&format!("end:{id}:hostA\n")), "{id}:\n{out}");
    }
    let retried: Vec<u64> = sqlx::query_scalar("SELECT id FROM job_queue WHERE attempts <> 1")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let mut expected: Vec<u64> = on_b.iter().map(|r| r.0).collect();
    expected.sort();
    assert_eq!(retried, expected, "only host B's jobs ran twice");

    let mut h = History::of_commands(&dir.join("effects"), &db.pool).await;
    for (id, _) in &on_b {
        h.saw_gone(*id, 1, gone_at);
    }
    h.read_worker_log(&a.log());
    h.read_worker_log(&b.log());
    let expect = b_tokens
        .iter()
        .fold(Expectations::no_faults(), |e, t| e.lost(t));
    let summary = assert_clean(&h, &expect);
    assert_eq!(
        (summary.jobs, summary.done, summary.copies, summary.rerun),
        (48, 48, 48 + on_b.len(), on_b.len()),
        "{summary:?}"
    );
}

/// Two hosts under one host name (containers given the machine's name, as `--network host` does) run
/// workers with the same pids. When a worker dies on one, its supervisor releases that worker's rows
/// and none of the live twin's on the other host. Then the jobs are let finish, and what their copies
/// recorded, the rows and `jobq_attempts` are checked as one history: only the dead worker's jobs ran
/// twice, never two copies of one at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_releases_only_its_own_hosts_rows_when_names_and_pids_coincide() {
    if !can_make_hosts() {
        eprintln!("SKIPPED: cannot make network and pid namespaces here (needs root, ip, unshare)");
        return;
    }
    sweep_leftover_hosts();
    let db = TestDb::new().await;
    let dir = crate::common::scratch_dir();
    let cfg = config(&dir);
    let workers = ["-n", "2", "-c", "2"];
    let a = Host::start(&db, 'c', "twin", 0, &cfg, &workers);
    let b = Host::start(&db, 'd', "twin", 0, &cfg, &workers);
    let procs = registered(&db, 4, 2).await;
    let (id_a, id_b) = (a.host_id(), b.host_id());
    let workers_on = |host_id: &str| -> HashMap<i32, String> {
        procs
            .iter()
            .filter(|p| p.role == "worker" && p.host_id == host_id && p.host == "twin")
            .map(|p| (p.pid, p.token.clone()))
            .collect()
    };
    let (on_a, on_b) = (workers_on(&id_a), workers_on(&id_b));
    let twins: Vec<i32> = on_a
        .keys()
        .filter(|p| on_b.contains_key(p))
        .copied()
        .collect();
    assert!(
        !twins.is_empty(),
        "no pid runs a worker on both hosts: {procs:?}"
    );

    // Every slot busy: each worker holds two running jobs.
    db.insert_jobs("hold", 8).await;
    wait_until("8 jobs running", Duration::from_secs(20), || async {
        db.states().await == "running=8"
            && effects(&dir)
                .lines()
                .filter(|l| l.starts_with("start:"))
                .count()
                == 8
    })
    .await;
    let before = running(&db).await;
    let pid = twins[0];
    let (dying, twin) = (&on_a[&pid], &on_b[&pid]);
    let twin_rows: Vec<u64> = before
        .iter()
        .filter(|r| &r.1 == twin)
        .map(|r| r.0)
        .collect();
    assert!(!twin_rows.is_empty(), "{before:?}");
    let here = a
        .pids()
        .into_iter()
        .find(|(_, inner)| *inner == pid)
        .expect("host A's worker")
        .0;
    kill(Pid::from_raw(here), Signal::SIGKILL).unwrap();
    wait_until(
        "the dead worker's rows released",
        Duration::from_secs(10),
        || async { running(&db).await.iter().all(|r| &r.1 != dying) },
    )
    .await;
    // A reaper interval and more, for host A's reaper and the supervisor's second sweep to pass too.
    tokio::time::sleep(ReaperConfig::DEFAULT_INTERVAL + Duration::from_secs(1)).await;
    let ids: Vec<String> = twin_rows.iter().map(u64::to_string).collect();
    let touched: Vec<(u64, Option<String>, u16)> = sqlx::query_as(&format!(
        "SELECT id, CAST(claim AS CHAR), attempts FROM job_queue WHERE id IN ({}) \
         AND NOT (state = 'running' AND claim = ? AND attempts = 1)",
        ids.join(",")
    ))
    .bind(twin)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        touched.is_empty(),
        "host A released rows of host B's live worker {twin} (pid {pid} on both hosts): {touched:?}; \
         host A's log:\n{}",
        a.log()
    );
    assert!(
        !b.log().contains("claim lost"),
        "host B lost claims:\n{}",
        b.log()
    );
    let starts = effects(&dir);
    for id in &twin_rows {
        assert_eq!(
            starts.matches(&format!("start:{id}:")).count(),
            1,
            "{starts}"
        );
    }
    assert!(!effects(&dir).contains("OVERLAP"), "{}", effects(&dir));

    // Wind down: every hold job ends, the dead worker's on the copies that took them over.
    let dead_rows = before.iter().filter(|r| &r.1 == dying).count();
    std::fs::write(dir.join("release"), "").unwrap();
    wait_until("every job done", Duration::from_secs(30), || async {
        db.states().await == "done=8"
    })
    .await;
    let mut h = History::of_commands(&dir.join("effects"), &db.pool).await;
    // A copy starts only holding its job's lock, so the dead worker's copies were gone by then.
    h.saw_gone_at_lock_handoffs();
    h.read_worker_log(&a.log());
    h.read_worker_log(&b.log());
    let summary = assert_clean(&h, &Expectations::no_faults().lost(dying));
    assert_eq!(
        (summary.jobs, summary.done, summary.copies, summary.rerun),
        (8, 8, 8 + dead_rows, dead_rows),
        "{summary:?}"
    );
}
