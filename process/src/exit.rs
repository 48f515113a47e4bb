//! How a binary ends on an error.

use std::error::Error;
use std::process::ExitCode;

/// An error and its causes on one line, `: `-separated; a cause whose text
/// the line already holds (an error that prints its source) is left out.
pub fn line(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out.replace('\n', " ")
}

/// Exit status 0 on `Ok`; on `Err`, `error: ` and [`line`] on stderr, no
/// backtrace whatever `RUST_BACKTRACE` says, and exit status 1.
pub fn code<E>(result: Result<(), E>) -> ExitCode
where
    E: std::ops::Deref<Target = dyn Error + Send + Sync + 'static>,
{
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", line(&*e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Wrapper {
        #[error("I/O: {0}")]
        Io(#[from] std::io::Error),
        #[error("opening the key")]
        Context(#[source] std::io::Error),
    }

    #[test]
    fn causes_print_once() {
        let io = || std::io::Error::from_raw_os_error(21);
        let e = Wrapper::from(io());
        assert_eq!(line(&e), "I/O: Is a directory (os error 21)");
        let e = Wrapper::Context(io());
        assert_eq!(line(&e), "opening the key: Is a directory (os error 21)");
    }
}
