//! How a command handler's program reports: two files jobq names in its environment, so that a shell
//! script reports with `echo`, and no program needs the queue's database credentials.
//!
//! - `JOBQ_PROGRESS_FILE`: the program writes (overwrites) a line `PERCENT [MESSAGE]`, e.g.
//!   `echo "40 resized 4 of 10" > "$JOBQ_PROGRESS_FILE"`. jobq reads it once a second while the program
//!   runs, and once more when it exits, and records what changed as the job's progress.
//! - `JOBQ_OUTPUT_FILE`: JSON of at most 64 KiB the job leaves on its row, read when the program exits
//!   with status 0. Output that is not JSON, or is larger, fails the job for good, naming the file:
//!   the program is wrong, and running it again would not change that.
//!
//! Both live in a directory of the job's own (mode 0700) that is removed when the attempt ends.

use std::path::PathBuf;

use super::{JobContext, JobError};
use crate::db::report::MAX_OUTPUT;

/// The job's report directory and its two files.
pub(super) struct ReportFiles {
    dir: PathBuf,
    pub(super) progress: PathBuf,
    pub(super) output: PathBuf,
}

impl ReportFiles {
    /// Makes the directory for `job`'s attempt under the system's temporary directory.
    pub(super) fn create(job: &JobContext) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!(
            "jobq-{}-{}-{}-{:08x}",
            std::process::id(),
            job.id,
            job.attempt,
            rand::random::<u32>()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Self {
            progress: dir.join("progress"),
            output: dir.join("output"),
            dir,
        })
    }

    /// Reads the progress file and records it when it says something new since `last`.
    pub(super) async fn record_progress(&self, job: &JobContext, last: &mut Option<String>) {
        let Ok(text) = tokio::fs::read_to_string(&self.progress).await else {
            return;
        };
        let line = text.lines().next().unwrap_or("").trim().to_string();
        if line.is_empty() || last.as_deref() == Some(line.as_str()) {
            return;
        }
        match parse_progress(&line) {
            Ok((percent, message)) => {
                if let Err(e) = job.progress(percent, message).await {
                    tracing::warn!(job_id = job.id.0, file = %self.progress.display(), error = %e, "a progress line jobq cannot record");
                }
            }
            Err(why) => {
                tracing::warn!(job_id = job.id.0, file = %self.progress.display(), line, "{why}");
            }
        }
        *last = Some(line);
    }

    /// Records the output file, if the program wrote one.
    pub(super) async fn record_output(&self, job: &JobContext) -> Result<(), JobError> {
        let bytes = match tokio::fs::read(&self.output).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(JobError::retry(format!(
                    "cannot read JOBQ_OUTPUT_FILE {}: {e}",
                    self.output.display()
                )));
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let value = checked_output(&bytes).map_err(|why| {
            JobError::fatal(format!("JOBQ_OUTPUT_FILE {}: {why}", self.output.display()))
        })?;
        job.output(&value).await
    }
}

impl Drop for ReportFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `PERCENT [MESSAGE]`: a number from 0 to 100, then the rest of the line.
fn parse_progress(line: &str) -> Result<(f64, Option<&str>), String> {
    let (number, rest) = match line.split_once(char::is_whitespace) {
        Some((n, rest)) => (n, Some(rest.trim()).filter(|r| !r.is_empty())),
        None => (line, None),
    };
    let percent: f64 = number.trim_end_matches('%').parse().map_err(|_| {
        format!("a progress line starts with a percent from 0 to 100, not {number:?}")
    })?;
    if !(0.0..=100.0).contains(&percent) {
        return Err(format!(
            "a progress percent is from 0 to 100, not {percent}"
        ));
    }
    Ok((percent, rest))
}

/// The output file's JSON, if it is JSON of at most [`MAX_OUTPUT`] bytes.
fn checked_output(bytes: &[u8]) -> Result<serde_json::Value, String> {
    if bytes.len() > MAX_OUTPUT {
        return Err(format!(
            "{} bytes; an output is at most {MAX_OUTPUT} bytes (64 KiB) of JSON",
            bytes.len()
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines() {
        assert_eq!(parse_progress("40"), Ok((40.0, None)));
        assert_eq!(
            parse_progress("40% resized 4 of 10"),
            Ok((40.0, Some("resized 4 of 10")))
        );
        assert_eq!(parse_progress("12.5   "), Ok((12.5, None)));
        assert!(
            parse_progress("half done")
                .unwrap_err()
                .contains("\"half\"")
        );
        assert!(
            parse_progress("120 too far")
                .unwrap_err()
                .contains("0 to 100")
        );
    }

    #[test]
    fn output_files() {
        assert_eq!(
            checked_output(b"{\"a\": 1}\n"),
            Ok(serde_json::json!({"a": 1}))
        );
        assert!(checked_output(b"rows: 3").unwrap_err().contains("not JSON"));
        let big = format!("\"{}\"", "x".repeat(MAX_OUTPUT));
        assert!(
            checked_output(big.as_bytes())
                .unwrap_err()
                .contains("64 KiB")
        );
    }

    #[test]
    fn the_directory_is_the_jobs_own_and_goes_with_it() {
        let job = JobContext::for_test("k", "{}");
        let files = ReportFiles::create(&job).unwrap();
        let dir = files.dir.clone();
        assert!(dir.starts_with(std::env::temp_dir()));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::write(&files.output, "{}").unwrap();
        drop(files);
        assert!(!dir.exists());
    }
}
