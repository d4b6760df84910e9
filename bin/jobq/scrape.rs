//! One metrics endpoint for a supervisor and its workers: `jobq supervise --metrics-addr` starts each
//! child with a metrics listener of its own on a free loopback port, which the child writes to a file
//! named for its slot in a directory the supervisor gives it (`JOBQ_METRICS_DIR`). A scrape of the
//! supervisor reads its own figures, fetches each child's, and merges them into one exposition: each
//! metric family once, the children's series labelled `slot="N"` (stable across restarts, unlike a pid).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The environment variable naming the directory children write their metrics address to.
pub const METRICS_DIR_ENV: &str = "JOBQ_METRICS_DIR";

/// How long one child's scrape may take; a child that does not answer is left out of that scrape.
const CHILD_TIMEOUT: Duration = Duration::from_secs(2);

/// The file child `slot` writes its address to.
fn addr_file(dir: &Path, slot: &str) -> PathBuf {
    dir.join(format!("slot-{slot}.addr"))
}

/// In a supervised child with `JOBQ_METRICS_DIR` set: records where its metrics listener is. Written
/// to a temporary name and renamed, so a scrape never reads half an address.
pub fn announce(bound: std::net::SocketAddr) -> std::io::Result<()> {
    let (Some(dir), Ok(slot)) = (
        std::env::var_os(METRICS_DIR_ENV),
        std::env::var(jobq::for_the_binary::SUPERVISOR_SLOT_ENV),
    ) else {
        return Ok(());
    };
    let dir = PathBuf::from(dir);
    let file = addr_file(&dir, &slot);
    let tmp = dir.join(format!(".slot-{slot}.{}", std::process::id()));
    std::fs::write(&tmp, bound.to_string())?;
    std::fs::rename(tmp, file)
}

/// The children's expositions: `(slot, text)` for each child that answered.
pub async fn children(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut files: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let slot = name
                .strip_prefix("slot-")?
                .strip_suffix(".addr")?
                .to_string();
            Some((slot, e.path()))
        })
        .collect();
    files.sort();
    for (slot, path) in files {
        let Ok(addr) = std::fs::read_to_string(&path) else {
            continue;
        };
        match tokio::time::timeout(CHILD_TIMEOUT, fetch(addr.trim())).await {
            Ok(Ok(text)) => out.push((slot, text)),
            // A child that died since (its replacement writes the file anew) or is busy.
            _ => tracing::debug!(
                slot,
                addr = addr.trim(),
                "a worker's metrics did not answer"
            ),
        }
    }
    out
}

/// `GET /metrics` from `addr`: the body.
async fn fetch(addr: &str) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    if !text.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other("not 200"));
    }
    Ok(text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string())
}

/// What a line of an exposition is.
enum Line {
    Help,
    Type,
    Sample,
}

/// One family of the merged exposition.
#[derive(Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    samples: Vec<String>,
}

/// Merges the supervisor's exposition (`own`) with its children's: each family's HELP and TYPE once,
/// then every sample of it, the children's with `slot="N"` added to their labels.
pub fn merge(own: &str, children: &[(String, String)]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: std::collections::HashMap<String, Family> = Default::default();
    let sources = std::iter::once((None, own)).chain(
        children
            .iter()
            .map(|(slot, text)| (Some(slot.as_str()), text.as_str())),
    );
    for (slot, text) in sources {
        let mut current: Option<String> = None;
        for line in text.lines() {
            let (name, what) = if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or_default().to_string();
                current = Some(name.clone());
                (name, Line::Help)
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap_or_default().to_string();
                current = Some(name.clone());
                (name, Line::Type)
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let sample = line.split(['{', ' ']).next().unwrap_or_default();
                // Histogram samples (`_bucket`, `_sum`, `_count`) belong to the family declared above.
                let name = match &current {
                    Some(f) if sample.starts_with(f.as_str()) => f.clone(),
                    _ => sample.to_string(),
                };
                (name, Line::Sample)
            } else {
                continue;
            };
            if !families.contains_key(&name) {
                order.push(name.clone());
            }
            let family = families.entry(name).or_default();
            match what {
                Line::Help => {
                    family.help.get_or_insert_with(|| line.to_string());
                }
                Line::Type => {
                    family.kind.get_or_insert_with(|| line.to_string());
                }
                Line::Sample => family.samples.push(labelled(line, slot)),
            }
        }
    }
    let mut out = String::new();
    for name in order {
        let f = &families[&name];
        for line in [&f.help, &f.kind].into_iter().flatten() {
            out.push_str(line);
            out.push('\n');
        }
        for s in &f.samples {
            out.push_str(s);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// `sample` with `slot="N"` as its first label.
fn labelled(sample: &str, slot: Option<&str>) -> String {
    let Some(slot) = slot else {
        return sample.to_string();
    };
    let name_end = sample.find(['{', ' ']).unwrap_or(sample.len());
    let (name, rest) = sample.split_at(name_end);
    match rest.strip_prefix('{') {
        Some(labels) if labels.starts_with('}') => format!("{name}{{slot=\"{slot}\"{labels}"),
        Some(labels) => format!("{name}{{slot=\"{slot}\",{labels}"),
        None => format!("{name}{{slot=\"{slot}\"}}{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_appear_once_and_children_are_labelled_by_slot() {
        let own = "# HELP jobq_processes Registered.\n# TYPE jobq_processes gauge\njobq_processes{role=\"supervisor\"} 1\n";
        let child = "# HELP jobq_jobs_running Running.\n# TYPE jobq_jobs_running gauge\njobq_jobs_running 2\n\n\
                     # TYPE jobq_claim_duration_seconds histogram\n\
                     jobq_claim_duration_seconds_bucket{le=\"0.001\"} 3\n\
                     jobq_claim_duration_seconds_sum 0.002\n\
                     jobq_claim_duration_seconds_count 3\n";
        let merged = merge(
            own,
            &[("0".into(), child.into()), ("1".into(), child.into())],
        );
        assert_eq!(
            merged.matches("# TYPE jobq_jobs_running gauge").count(),
            1,
            "{merged}"
        );
        assert!(
            merged.contains("jobq_jobs_running{slot=\"0\"} 2\njobq_jobs_running{slot=\"1\"} 2\n")
        );
        assert!(merged.contains("jobq_claim_duration_seconds_bucket{slot=\"1\",le=\"0.001\"} 3"));
        assert!(merged.contains("jobq_claim_duration_seconds_count{slot=\"0\"} 3"));
        assert!(merged.contains("jobq_processes{role=\"supervisor\"} 1"));
        let histogram = merged.find("# TYPE jobq_claim_duration_seconds").unwrap();
        assert!(
            merged[histogram..]
                .starts_with("# TYPE jobq_claim_duration_seconds histogram\njobq_claim")
        );
    }

    #[test]
    fn empty_label_sets_get_the_slot_alone() {
        assert_eq!(labelled("m{} 1", Some("2")), "m{slot=\"2\"} 1");
        assert_eq!(labelled("m 1", None), "m 1");
    }
}
