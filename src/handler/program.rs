//! Finding a command handler's program the way the worker's spawn will find it, so that a typo is one
//! clear error when a worker starts instead of every job of the kind failing its attempts one by one.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The search path `execvp` uses when `PATH` is not set (glibc's default).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Where `program` is found, as the worker's spawn will look for it: a name with a `/` is a path (relative
/// to the working directory), any other name is searched in the directories of `path`.
///
/// # Errors
/// A sentence saying why the program cannot be run: missing, a directory, not executable, not on the path.
pub fn find_program(program: &str, path: Option<&OsStr>) -> std::result::Result<PathBuf, String> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return match executable(&p) {
            Ok(()) => Ok(p),
            Err(why) => Err(format!("program {program:?} {why}")),
        };
    }
    let dirs = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    for dir in std::env::split_paths(dirs) {
        // An empty entry in PATH means the working directory.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if executable(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "program {program:?} is not found on PATH ({}); give its full path or fix PATH",
        dirs.to_string_lossy()
    ))
}

/// `Ok` when `p` is a file with an execute bit (even root cannot exec a file without one).
fn executable(p: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_string(),
        _ => format!("cannot be read: {e}"),
    })?;
    if meta.is_dir() {
        return Err("is a directory".into());
    }
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err(format!("is not executable (mode {:o})", mode & 0o7777));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_as_exec_finds_them() {
        let path = Some(OsStr::new("/nonexistent:/bin:/usr/bin"));
        assert!(find_program("sh", path).is_ok());
        let e = find_program("no-such-program-xyz", path).unwrap_err();
        assert!(
            e.contains("not found on PATH") && e.contains("/nonexistent"),
            "{e}"
        );
        let e = find_program("/no/such/file", path).unwrap_err();
        assert!(e.contains("\"/no/such/file\" does not exist"), "{e}");
        let e = find_program("/tmp", path).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let file = std::env::temp_dir().join(format!("jobq-noexec-{}", rand::random::<u64>()));
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        let e = find_program(file.to_str().unwrap(), path).unwrap_err();
        assert!(e.contains("not executable (mode 644)"), "{e}");
        std::fs::remove_file(&file).ok();
    }
}
