//! `[databases.NAME]`: one file, and one `jobq supervise`, serving several databases.
//!
//! Each section is a whole config of its own (its `database_url`, handlers, schedules, worker count and
//! settings) laid over the file's top level, which holds what the databases share. The merge is done on
//! the TOML tables, before the typed config is built, so a section is checked exactly as a file of its
//! own would be:
//! * a settings table (`[worker]`, `[retry]`, `[prune]`, `[reaper]`, `[scheduler]`, `[supervisor]`) merges
//!   key by key, the section's keys winning;
//! * `[handlers.KIND]` merges by kind: a section's handler replaces the top level's of that kind whole
//!   (merging the keys of two handlers could leave one with both `command` and `sql`);
//! * every other key (`workers`, the TLS and password-file keys) is the section's if it sets one, else
//!   the top level's.
//!
//! What the top level cannot hold once there are sections: a `database_url` (each section names its own,
//! so no database is reached through a default by accident) and `[schedules]` (a schedule makes jobs in
//! one database; copying it into every one is never what was meant).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Config;

/// The top-level tables that merge key by key.
const MERGED_BY_KEY: &[&str] = &[
    "worker",
    "retry",
    "prune",
    "reaper",
    "scheduler",
    "supervisor",
];
/// The longest section name: it labels logs and metrics, so it is kept short and plain.
const MAX_NAME_LEN: usize = 64;

/// The typed configs of the file's `[databases.NAME]` sections, each merged over `top` (the whole
/// file's table). Errors name the section and the key.
pub(super) fn resolve(top: &toml::Table) -> std::result::Result<BTreeMap<String, Config>, String> {
    let Some(sections) = top.get("databases") else {
        return Ok(BTreeMap::new());
    };
    let sections = sections
        .as_table()
        .ok_or("databases: expected [databases.NAME] sections")?;
    if sections.is_empty() {
        return Err("databases: add at least one [databases.NAME] section".into());
    }
    if top.contains_key("database_url") {
        return Err(
            "database_url: with [databases.NAME] sections, each section sets its own \
             database_url; remove the top-level one"
                .into(),
        );
    }
    if top.contains_key("schedules") {
        return Err(
            "schedules: with [databases.NAME] sections, a schedule belongs to one \
             database; move [schedules.X] to [databases.NAME.schedules.X]"
                .into(),
        );
    }
    let mut out = BTreeMap::new();
    for (name, section) in sections {
        let at = |e: String| format!("databases.{name}: {e}");
        check_name(name).map_err(at)?;
        let section = section
            .as_table()
            .ok_or_else(|| at("expected a table of settings".into()))?;
        if section.contains_key("databases") {
            return Err(at(
                "sections do not nest; move [databases] to the top level".into(),
            ));
        }
        if !section.contains_key("database_url") {
            return Err(at(
                "set database_url, the database this section serves".into()
            ));
        }
        let merged = merge(top, section);
        let config = Config::deserialize(toml::Value::Table(merged))
            .map_err(|e| at(e.to_string().trim().to_string()))?;
        config.validate().map_err(at)?;
        out.insert(name.clone(), config);
    }
    check_distinct(&out)?;
    Ok(out)
}

/// A section name: letters, digits, `_` and `-`, at most [`MAX_NAME_LEN`] characters.
fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!("a name is 1 to {MAX_NAME_LEN} characters"));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
    {
        Some(c) => Err(format!(
            "the name contains {c:?}; use letters, digits, _ and -"
        )),
        None => Ok(()),
    }
}

/// `section` laid over `top` (without `databases`), by the rules in the module docs.
fn merge(top: &toml::Table, section: &toml::Table) -> toml::Table {
    let mut out: toml::Table = top
        .iter()
        .filter(|(k, _)| k.as_str() != "databases")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (key, value) in section {
        let merge_keys = MERGED_BY_KEY.contains(&key.as_str()) || key == "handlers";
        match (out.get_mut(key), value) {
            (Some(toml::Value::Table(base)), toml::Value::Table(over)) if merge_keys => {
                for (k, v) in over {
                    base.insert(k.clone(), v.clone());
                }
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    out
}

/// Two sections must not name one database: their workers would share its queue under two sets of
/// handlers. Compared by host list, port and database name (user and password aside).
fn check_distinct(sections: &BTreeMap<String, Config>) -> std::result::Result<(), String> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for (name, config) in sections {
        let Some(url) = config.database_url.as_deref() else {
            continue;
        };
        let key = crate::db::database_key(url);
        if let Some(other) = seen.insert(key, name) {
            return Err(format!(
                "databases.{other} and databases.{name} name the same database; each section \
                 serves a database of its own"
            ));
        }
    }
    Ok(())
}
