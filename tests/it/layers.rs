//! The library's modules import each other in one direction only: no two modules of `src/` depend on
//! each other, directly or through others. A circle is how a leaf (`job.rs`, `schedule/`) starts to
//! need a service, and how a refactor of one part turns into a refactor of all of them.
//!
//! Read from the source text: every `crate::a::b` and `super::a` path (in `use` lines, `use
//! crate::{..}` groups and code) is an edge from the file's module to the module that defines what it
//! names, followed through re-exports (`crate::WorkerConfig` is `worker::config`). A module's own
//! descendants and ancestors are not counted (a parent re-exporting its children is no circle), nor
//! is `#[cfg(test)]` code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`db::claim`) → its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The paths named after `crate::` in `code`, as written (`db::claim::claim_batch`), including each
/// item of a `use crate::{a, b::c}` group.
fn crate_paths(code: &str) -> Vec<String> {
    paths_after(code, "crate::")
}

/// The paths named after `prefix` (`crate::` or `super::`) in `code`.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let path: String = item.trim().chars().take_while(|c| ident(*c)).collect();
                out.push(path);
            }
        } else {
            out.push(after.chars().take_while(|c| ident(*c)).collect());
        }
        rest = after;
    }
    out
}

/// A file's code without `#[cfg(test)]` parts and line comments.
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names a module re-exports (`pub use a::b::{X, Y};`, `pub(crate) use c::Z;`), each with the
/// path it comes from, relative to the module (or from the crate root when written `crate::…`).
fn reexports(code: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        let Some(rest) = stmt
            .strip_prefix("pub use ")
            .or_else(|| stmt.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let rest: String = rest.split_whitespace().collect();
        let (prefix, items) = match rest.split_once("::{") {
            Some((p, group)) => (format!("{p}::"), group.trim_end_matches('}').to_string()),
            None => (String::new(), rest),
        };
        for item in items.split(',').filter(|i| !i.is_empty()) {
            let path = format!("{prefix}{item}");
            let name = item.rsplit("::").next().unwrap().to_string();
            out.push((name, path));
        }
    }
    out
}

/// The modules of `src/` and what each re-exports, to resolve a path to the module that defines it.
struct Crate {
    modules: BTreeMap<String, PathBuf>,
    /// (module, name) → (module the path is relative to, path).
    reexported: BTreeMap<(String, String), (String, String)>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let modules = modules(src);
        let mut reexported = BTreeMap::new();
        for (module, file) in &modules {
            for (name, path) in reexports(&code_of(file)) {
                let (base, path) = match path.strip_prefix("crate::") {
                    Some(p) => (String::new(), p.to_string()),
                    None => (module.clone(), path),
                };
                reexported.insert((module.clone(), name), (base, path));
            }
        }
        Crate {
            modules,
            reexported,
        }
    }

    /// The module that defines what `path` (relative to module `base`) names: down through child
    /// modules, and through re-exports to where an item really lives. None outside the crate.
    fn resolve(&self, base: &str, path: &str, depth: u32) -> Option<String> {
        let mut at = base.to_string();
        for seg in path.split("::").filter(|s| !s.is_empty()) {
            let child = if at.is_empty() {
                seg.to_string()
            } else {
                format!("{at}::{seg}")
            };
            if self.modules.contains_key(&child) {
                at = child;
                continue;
            }
            if depth < 8
                && let Some((from, p)) = self.reexported.get(&(at.clone(), seg.to_string()))
            {
                return self.resolve(from, p, depth + 1).or(Some(at));
            }
            break;
        }
        (!at.is_empty() && at != base).then_some(at)
    }
}

/// The edges of `src/`'s module graph.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let krate = Crate::read(src);
    let related = |a: &str, b: &str| {
        a.is_empty()
            || b.is_empty()
            || a.starts_with(&format!("{b}::"))
            || b.starts_with(&format!("{a}::"))
    };
    let mut edges = BTreeMap::new();
    for (module, file) in &krate.modules {
        let code = code_of(file);
        // `super::` is the parent of the module, whether it lives in `x.rs` or `x/mod.rs`.
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p).to_string();
        let supers = paths_after(&code, "super::")
            .into_iter()
            .filter(|p| !p.starts_with("super::"))
            .map(|p| (parent.clone(), p));
        let to: BTreeSet<String> = crate_paths(&code)
            .into_iter()
            .map(|p| (String::new(), p))
            .chain(supers)
            .filter_map(|(base, p)| krate.resolve(&base, &p, 0))
            .filter(|t| t != module && !related(module, t))
            .collect();
        edges.insert(module.clone(), to);
    }
    edges
}

/// A path from `to` back to `from`, if there is one.
fn path_back(
    edges: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![to.to_string()]];
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap().clone();
        if last == from {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in edges.get(&last).into_iter().flatten() {
            let mut p = path.clone();
            p.push(next.clone());
            stack.push(p);
        }
    }
    None
}

#[test]
fn no_two_library_modules_depend_on_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&src);
    assert!(
        edges["worker::fetch"].contains("db::claim")
            && edges["worker::fetch"].contains("worker::pacing"),
        "the graph reader is broken: worker::fetch imports db::claim and, through super::, \
         worker::pacing; {edges:#?}"
    );
    let mut circles = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            if let Some(back) = path_back(&edges, from, to) {
                circles.push(format!("{from} -> {}", back.join(" -> ")));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles in src/:\n{}",
        circles.join("\n")
    );
}

#[test]
fn reexports_are_read_as_the_paths_they_name() {
    let r = reexports(
        "pub use config::{Mode, WorkerConfig};\npub(crate) use crate::db::errno::is_transient;",
    );
    assert_eq!(
        r,
        [
            ("Mode".to_string(), "config::Mode".to_string()),
            ("WorkerConfig".into(), "config::WorkerConfig".into()),
            (
                "is_transient".into(),
                "crate::db::errno::is_transient".into()
            ),
        ]
    );
}

#[test]
fn the_graph_reader_sees_groups_and_plain_paths() {
    let paths = crate_paths("use crate::{db::claim, job::State};\nlet x = crate::fence::MARGIN;");
    assert_eq!(paths, ["db::claim", "job::State", "fence::MARGIN"]);
}
