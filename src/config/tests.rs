use super::*;

fn parse(text: &str) -> std::result::Result<Config, String> {
    let dir = std::env::temp_dir().join(format!("jobq-cfg-{}", rand::random::<u64>()));
    std::fs::write(&dir, text).unwrap();
    let r = Config::load(&dir).map_err(|e| e.to_string());
    std::fs::remove_file(&dir).ok();
    r
}

#[test]
fn full_example_parses() {
    let c = parse(
        r#"
database_url = "mysql://u:p@h:3306/db"
[worker]
queues = ["default", "mail"]
concurrency = 4
poll_interval = "250ms"
[retry]
base = "1s"
[prune]
retention = "2d"
[handlers.resize]
command = ["convert", "-"]
timeout = "5m"
env = { A = "1" }
[handlers.rollup]
sql = "CALL rollup(?, ?)"
params = ["day", "region"]
"#,
    )
    .unwrap();
    assert_eq!(c.worker.concurrency, Some(4));
    assert_eq!(c.retention(), Duration::from_secs(2 * 86400));
    let specs = c.handler_specs();
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].0, "resize");
    assert_eq!(specs[1].2.timeout, None);
}

#[test]
fn sections_map_to_service_configs_with_defaults_for_unset_keys() {
    let c = parse(
        r#"
[worker]
concurrency = 4
heartbeat_interval = "3s"
[retry]
base = "1s"
[prune]
retention = "2d"
[reaper]
lease = "90s"
session_signals = false
[scheduler]
interval = "5s"
"#,
    )
    .unwrap();
    let w = c.worker().unwrap();
    assert_eq!(w.concurrency, 4);
    assert_eq!(w.batch_size, WorkerConfig::DEFAULT_BATCH_SIZE);
    assert_eq!(w.heartbeat_interval, Duration::from_secs(3));
    assert_eq!(w.retry.base, Duration::from_secs(1));
    assert_eq!(w.retry.cap, RetryPolicy::DEFAULT_CAP);
    let r = c.reaper().unwrap();
    assert_eq!(r.lease, Duration::from_secs(90));
    assert_eq!(r.interval, ReaperConfig::DEFAULT_INTERVAL);
    assert!(!r.session_signals);
    // The reaper judges workers by the heartbeat interval they are configured with.
    assert_eq!(r.heartbeat_interval, Duration::from_secs(3));
    assert_eq!(r.retention, Some(Duration::from_secs(2 * 86400)));
    let s = c.scheduler().unwrap();
    assert_eq!(s.interval, Duration::from_secs(5));
    assert_eq!(
        s.max_jobs_per_tick,
        SchedulerConfig::DEFAULT_MAX_JOBS_PER_TICK
    );

    let d = Config::default();
    assert_eq!(
        d.worker().unwrap().concurrency,
        WorkerConfig::DEFAULT_CONCURRENCY
    );
    assert_eq!(d.reaper().unwrap().lease, ReaperConfig::DEFAULT_LEASE);
    assert!(d.scheduler().unwrap().definitions.is_empty());
}

#[test]
fn a_config_built_in_code_is_checked_when_mapped() {
    let mut c = Config::default();
    c.worker.concurrency = Some(0);
    let e = c.worker().unwrap_err().to_string();
    assert!(e.contains("worker.concurrency must be at least 1"), "{e}");
}

#[test]
fn unknown_keys_are_named() {
    let e = parse("[worker]\nconcurency = 3\n").unwrap_err();
    assert!(e.contains("concurency"), "{e}");
    let e = parse("[handlers.x]\ncommand = [\"a\"]\nargs = []\n").unwrap_err();
    assert!(e.contains("args"), "{e}");
}

#[test]
fn bad_values_are_named() {
    let e = parse("[worker]\npoll_interval = \"soon\"\n").unwrap_err();
    assert!(e.contains("invalid duration \"soon\""), "{e}");
    let e = parse("[handlers.x]\nsql = \"CALL p(?, ?)\"\nparams = [\"a\"]\n").unwrap_err();
    assert!(e.contains("handlers.x") && e.contains("2 `?`"), "{e}");
    let e = parse("[handlers.x]\nsql = \"DO 1\"\ncommand = [\"true\"]\n").unwrap_err();
    assert!(e.contains("not both"), "{e}");
    let e = parse("[handlers.x]\n").unwrap_err();
    assert!(e.contains("set `command`"), "{e}");
    let e = parse("[handlers.\"bad kind\"]\ncommand = [\"true\"]\n").unwrap_err();
    assert!(e.contains("bad kind"), "{e}");
    let e = parse("[worker]\nconcurrency = 0\n").unwrap_err();
    assert!(e.contains("worker.concurrency"), "{e}");
}

#[test]
fn zero_intervals_huge_concurrency_and_a_cap_below_base_are_named() {
    for (text, needle) in [
        ("[worker]\npoll_interval = \"0s\"\n", "worker.poll_interval"),
        (
            "[worker]\nheartbeat_interval = \"0s\"\n",
            "worker.heartbeat_interval",
        ),
        ("[reaper]\ninterval = \"0s\"\n", "reaper.interval"),
        ("[reaper]\nlease = \"0ms\"\n", "reaper.lease"),
        ("[retry]\nbase = \"0s\"\n", "retry.base"),
        ("[worker]\nconcurrency = 10001\n", "10000"),
        (
            "[retry]\nbase = \"10s\"\ncap = \"5s\"\n",
            "retry.cap (5s) is below retry.base (10s)",
        ),
        ("[retry]\nbase = \"2h\"\n", "set retry.cap too"),
        (
            "[supervisor]\nrestart_delay = \"1m\"\n",
            "supervisor.max_restart_delay (30s) is below supervisor.restart_delay (1m)",
        ),
        (
            "[supervisor]\nstable_after = \"0s\"\n",
            "supervisor.stable_after must be above zero",
        ),
        ("[supervisor]\nrestart_dely = \"1s\"\n", "restart_dely"),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
    assert!(parse("[worker]\nconcurrency = 10000\n[retry]\nbase = \"1h\"\n").is_ok());
}

#[test]
fn a_handler_entry_takes_its_own_attempts_backoff_and_snooze() {
    let c = parse(
        r#"
[retry]
base = "1s"
cap = "2h"
[handlers.fetch]
command = ["fetch"]
max_attempts = 5
retry_base = "30s"
snooze = "15m"
[handlers.plain]
command = ["plain"]
"#,
    )
    .unwrap();
    let specs = c.handler_specs();
    let (kind, spec, options) = &specs[0];
    assert_eq!(kind, "fetch");
    assert_eq!(options.max_attempts, Some(5));
    // The bound the entry leaves out comes from [retry].
    assert_eq!(
        options.retry,
        Some(RetryPolicy {
            base: Duration::from_secs(30),
            cap: Duration::from_secs(7200),
        })
    );
    assert!(matches!(
        spec,
        HandlerSpec::Command { snooze: Some(d), .. } if *d == Duration::from_secs(900)
    ));
    let (_, spec, options) = &specs[1];
    assert_eq!(*options, crate::handler::HandlerOptions::default());
    assert!(matches!(spec, HandlerSpec::Command { snooze: None, .. }));
}

#[test]
fn a_backoff_cap_past_a_month_is_refused() {
    let e = parse("[retry]\ncap = \"60d\"\n").unwrap_err();
    assert!(
        e.contains("retry.cap (") && e.contains("is above the longest backoff jobq takes (30days)"),
        "{e}"
    );
    let e = parse("[handlers.k]\ncommand = [\"k\"]\nretry_cap = \"60d\"\n").unwrap_err();
    assert!(
        e.contains("handlers.k: retry_cap (") && e.contains("above the longest backoff"),
        "{e}"
    );
}

/// The commented example the README points to stays a valid config, its handlers included.
#[test]
fn the_example_config_in_the_repository_is_valid() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobq.toml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(!c.handlers.is_empty());
    for (kind, h) in &c.handlers {
        h.spec().unwrap_or_else(|e| panic!("handlers.{kind}: {e}"));
    }
    assert!(matches!(
        c.handlers["demo.chain"].spec().unwrap(),
        crate::handler::HandlerSpec::Sql {
            transactional: true,
            ..
        }
    ));
}

const TWO_DATABASES: &str = r#"
workers = 3
[worker]
concurrency = 20
batch_size = 5
[handlers.mail]
command = ["true"]
[handlers.resize]
command = ["true"]

[databases.shop]
database_url = "mysql://u@db1:3306/shop"
workers = 4
[databases.shop.worker]
concurrency = 7
[databases.shop.handlers.resize]
sql = "DO ?"
params = ["id"]
[databases.shop.schedules.nightly]
spec = "0 3 * * *"
kind = "mail"

[databases.crm]
database_url = "mysql://u@db2:3306/crm"
"#;

#[test]
fn database_sections_merge_over_the_top_level() {
    let c = parse(TWO_DATABASES).unwrap();
    assert_eq!(c.databases.keys().collect::<Vec<_>>(), vec!["crm", "shop"]);
    let shop = c.database("shop").unwrap();
    // Settings merge key by key: the section's concurrency, the top level's batch size.
    assert_eq!(shop.worker.concurrency, Some(7));
    assert_eq!(shop.worker.batch_size, Some(5));
    assert_eq!(shop.workers, Some(4));
    // Handlers merge by kind: the section's resize replaces the top level's whole.
    let kinds: Vec<_> = shop
        .handler_specs()
        .into_iter()
        .map(|(k, spec, _)| (k, matches!(spec, HandlerSpec::Sql { .. })))
        .collect();
    assert_eq!(
        kinds,
        vec![("mail".to_string(), false), ("resize".to_string(), true)]
    );
    assert_eq!(shop.schedules.len(), 1);
    assert!(shop.databases.is_empty());
    let crm = c.database("crm").unwrap();
    assert_eq!(crm.worker.concurrency, Some(20));
    assert_eq!(crm.workers, Some(3));
    assert!(crm.schedules.is_empty());
    assert_eq!(crm.database_url.as_deref(), Some("mysql://u@db2:3306/crm"));
    let e = c.database("billing").unwrap_err().to_string();
    assert!(
        e.contains("no [databases.billing] section; it has crm, shop"),
        "{e}"
    );
}

#[test]
fn bad_database_sections_are_refused_by_name() {
    let cases = [
        (
            "database_url = \"mysql://x/a\"\n[databases.a]\ndatabase_url = \"mysql://x/b\"\n",
            "each section sets its own database_url",
        ),
        (
            "[schedules.s]\nspec = \"* * * * *\"\nkind = \"k\"\n[databases.a]\ndatabase_url = \"mysql://x/b\"\n",
            "move [schedules.X] to [databases.NAME.schedules.X]",
        ),
        (
            "[databases.a]\nworkers = 2\n",
            "databases.a: set database_url",
        ),
        (
            "[databases.\"a b\"]\ndatabase_url = \"mysql://x/b\"\n",
            "databases.a b: the name contains ' '",
        ),
        (
            "[databases.a]\ndatabase_url = \"mysql://x/b\"\n[databases.a.worker]\nconcurency = 3\n",
            "databases.a: unknown field `concurency`",
        ),
        (
            "[databases.a]\ndatabase_url = \"mysql://x/b\"\nworkers = 0\n",
            "databases.a: workers = 0",
        ),
        (
            "[databases.a]\ndatabase_url = \"mysql://u:1@X:3306/b\"\n[databases.c]\ndatabase_url = \"mysql://v:2@x/b\"\n",
            "databases.a and databases.c name the same database",
        ),
        (
            "[databases.a]\ndatabase_url = \"mysql://x/b\"\n[databases.a.databases.b]\ndatabase_url = \"mysql://x/c\"\n",
            "sections do not nest",
        ),
        ("[databases]\n", "add at least one [databases.NAME] section"),
    ];
    for (text, want) in cases {
        let e = parse(text).unwrap_err();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn the_supervisor_section_sets_the_restart_timings_and_defaults_stand_for_the_rest() {
    let c = parse("[supervisor]\nrestart_delay = \"250ms\"\nstable_after = \"1m\"\n").unwrap();
    let cfg = c
        .supervisor
        .apply(crate::SupervisorConfig::new(3, PathBuf::from("jobq")))
        .unwrap();
    assert_eq!(cfg.workers, 3);
    assert_eq!(cfg.min_backoff, Duration::from_millis(250));
    assert_eq!(
        cfg.max_backoff,
        crate::SupervisorConfig::DEFAULT_MAX_BACKOFF
    );
    assert_eq!(cfg.stable_after, Duration::from_secs(60));
    let none = parse("")
        .unwrap()
        .supervisor
        .apply(crate::SupervisorConfig::new(1, PathBuf::new()));
    assert_eq!(
        none.unwrap().min_backoff,
        crate::SupervisorConfig::DEFAULT_MIN_BACKOFF
    );
}
