//! Writing to stdout and stderr without ever panicking.
//!
//! `println!` and `eprintln!` panic when the write fails. A reader that goes away is normal (`jobq jobs
//! list | head`, a `logger` that died), and Rust ignores SIGPIPE, so such a write returns EPIPE instead of
//! ending the process quietly. A panic there would be a crash with status 101, and in a worker a panic in
//! the logging of a task breaks that task (a worker whose log lines panic cannot even drain on SIGTERM).
//! So listings write through [`outln!`], which stops the command when stdout is closed, and logs and
//! error messages go to stderr through writers that drop what cannot be written. Text that comes from
//! rows goes through [`clean`] first.

pub use jobq::stats::human_age as age;
use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};

/// stdout was closed by its reader: the command stops writing, and jobq exits 0, since the reader asked
/// for no more.
#[derive(Debug)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for Closed {}

/// Writes `args` to stdout. A closed pipe becomes [`Closed`]; any other failure (a full disk) is an error
/// that names stdout.
pub fn write(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    match io::stdout().lock().write_fmt(args) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(Closed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to stdout")),
    }
}

/// Like `print!`, but returns an error instead of panicking (see the module docs).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

/// Like `println!`, but returns an error instead of panicking (see the module docs).
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

/// Writes a line to stderr, dropping it if stderr is gone: there is nowhere else to report that.
pub fn err_line(args: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{args}");
}

/// stderr for the log subscriber: a failed write is dropped, never turned into a panic or an error
/// the subscriber would report (on stderr, with `eprintln!`, which panics).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// Text from a row (a kind, a payload, a handler's stderr kept in `last_error`), made safe to print on
/// a terminal. Anyone who can insert a row chooses this text, and an escape sequence in it would be
/// obeyed by the operator's terminal: clear the screen, rewrite earlier lines, set the window title,
/// or worse on some terminals. Control characters and the bidirectional overrides (which reorder what
/// is shown) are written as escapes (`\x1b`, `\u{202e}`) instead; with `keep_lines`, newline and tab
/// stay, for multi-line fields.
pub fn clean(s: &str, keep_lines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && !(keep_lines && matches!(c, '\n' | '\t')))
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if u32::from(c) < 0x80 {
            out.push_str(&format!("\\x{:02x}", u32::from(c)));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    Cow::Owned(out)
}

/// Writes `value` to stdout as pretty JSON and a newline (`--json`). Field names are those the README's
/// "JSON output" section documents; they change only with a major version.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    write(format_args!("{text}\n"))
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(clean("plain text", false), "plain text");
        assert_eq!(clean("a\x1b[2Jb\x07", false), "a\\x1b[2Jb\\x07");
        assert_eq!(clean("one\ntwo\tx", false), "one\\x0atwo\\x09x");
        assert_eq!(clean("one\ntwo\tx\r", true), "one\ntwo\tx\\x0d");
        assert_eq!(
            clean("\u{9b}31m \u{202e}cba", true),
            "\\u{9b}31m \\u{202e}cba"
        );
    }
}
