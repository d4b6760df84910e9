//! Writing to stdout and stderr without ever panicking.
//!
//! `println!` and `eprintln!` panic when the write fails. A reader that goes away is normal (`jobq jobs
//! list | head`, a `logger` that died), and Rust ignores SIGPIPE, so such a write returns EPIPE instead of
//! ending the process quietly. A panic there would be a crash with status 101, and in a worker a panic in
//! the logging of a task breaks that task (a worker whose log lines panic cannot even drain on SIGTERM).
//! So listings write through [`outln!`], which stops the command when stdout is closed, and logs and
//! error messages go to stderr through writers that drop what cannot be written.

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
