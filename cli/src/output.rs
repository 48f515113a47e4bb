//! The rules of what a command prints, in one place:
//!
//! - a command's result goes to standard output, one result per command:
//!   text for people, or one JSON document with `--json` (read commands);
//! - errors are one line on standard error, `error: ` and the cause chain
//!   with no cause repeated ([`ozone_process::exit::line`]), exit status 1;
//! - warnings are `warning: ` lines on standard error;
//! - log lines are off for user commands: `-v` (info) or `-vv` (debug), or
//!   `RUST_LOG`, turn them on, on standard error; the OM, datanode and
//!   sidecar processes log at info by default;
//! - summaries of moved bytes and progress go to standard error, progress
//!   only when standard error is a terminal;
//! - sizes print in binary units ([`human`]), times as UTC dates ([`time`]).

use std::io::IsTerminal;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Installs logging: `default` unless `RUST_LOG` is set; user commands
/// pass "off" (or what `-v` asks for), server processes "info".
pub(crate) fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// The default log filter of a user command run with `verbose` `-v` flags.
pub(crate) fn user_log_level(verbose: u8) -> &'static str {
    match verbose {
        0 => "off",
        1 => "info",
        _ => "debug",
    }
}

/// A warning for the user, on standard error.
pub(crate) fn warn(msg: impl std::fmt::Display) {
    eprintln!("warning: {msg}");
}

/// Prints `value` as the command's JSON result.
pub(crate) fn json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// `n` bytes in binary units: `512 B`, `1.5 KiB`, `3.0 GiB`.
pub(crate) fn human(n: u64) -> String {
    const U: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Milliseconds since the epoch as a UTC date and time, to the second.
pub(crate) fn time(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Progress of a transfer on a terminal: bytes, rate and time left,
/// redrawn at most every 200 ms on standard error. Silent when standard
/// error is not a terminal.
pub(crate) struct Progress {
    total: Option<u64>,
    done: u64,
    start: Instant,
    drawn: Option<Instant>,
    on: bool,
}

impl Progress {
    /// Progress of a transfer of `total` bytes (if known).
    pub(crate) fn new(total: Option<u64>) -> Self {
        Self::with_output(total, std::io::stderr().is_terminal())
    }

    fn with_output(total: Option<u64>, on: bool) -> Self {
        Self {
            total,
            done: 0,
            start: Instant::now(),
            drawn: None,
            on,
        }
    }

    /// Counts `n` more bytes done.
    pub(crate) fn advance(&mut self, n: usize) {
        self.done += n as u64;
        if !self.on {
            return;
        }
        let now = Instant::now();
        if self
            .drawn
            .is_some_and(|t| now - t < Duration::from_millis(200))
        {
            return;
        }
        self.drawn = Some(now);
        eprint!("\r\x1b[K{}", self.line(now - self.start));
    }

    /// The progress line after `elapsed`.
    fn line(&self, elapsed: Duration) -> String {
        let rate = self.done as f64 / elapsed.as_secs_f64().max(1e-3);
        let mut s = format!("{} at {}/s", human(self.done), human(rate as u64));
        if let Some(total) = self.total.filter(|t| *t > 0) {
            let left = total.saturating_sub(self.done) as f64 / rate.max(1.0);
            s = format!(
                "{} of {} ({:.0}%) at {}/s, {:.0}s left",
                human(self.done),
                human(total),
                self.done as f64 * 100.0 / total as f64,
                human(rate as u64),
                left
            );
        }
        s
    }

    /// Clears the progress line.
    pub(crate) fn finish(&mut self) {
        if self.on && self.drawn.is_some() {
            eprint!("\r\x1b[K");
        }
    }
}

/// A reader or writer that reports the bytes through it to a [`Progress`].
pub(crate) struct Counted<T> {
    pub(crate) inner: T,
    pub(crate) progress: Progress,
}

/// A local source of bytes: a file, or standard input for `-`.
pub(crate) type Input = Counted<Box<dyn AsyncRead + Unpin + Send>>;

/// Opens `path` (`-`: standard input) with progress against its size.
pub(crate) async fn open_input(path: &std::path::Path) -> anyhow::Result<Input> {
    use anyhow::Context as _;
    if path == std::path::Path::new("-") {
        return Ok(Counted {
            inner: Box::new(tokio::io::stdin()),
            progress: Progress::new(None),
        });
    }
    let f = tokio::fs::File::open(path)
        .await
        .with_context(|| format!("opening {}", path.display()))?;
    let size = f.metadata().await.ok().map(|m| m.len());
    Ok(Counted {
        inner: Box::new(f),
        progress: Progress::new(size),
    })
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.progress.advance(n);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.progress.advance(*n);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_in_utc() {
        assert_eq!(time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(time(1_796_342_400_000 + 61_000), "2026-12-04 00:01:01 UTC");
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }

    #[test]
    fn progress_says_done_total_and_time_left() {
        let mut p = Progress::with_output(Some(100 << 20), false);
        p.advance(25 << 20);
        let l = p.line(Duration::from_secs(1));
        assert_eq!(l, "25.0 MiB of 100.0 MiB (25%) at 25.0 MiB/s, 3s left");
        let mut p = Progress::with_output(None, false);
        p.advance(2048);
        assert_eq!(p.line(Duration::from_secs(2)), "2.0 KiB at 1.0 KiB/s");
    }
}
