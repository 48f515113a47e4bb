//! How a binary ends on an error.

use std::process::ExitCode;

/// Exit status 0 on `Ok`; on `Err`, the error on one line of stderr
/// (`error: ` and its chain, `{:#}`), no backtrace whatever
/// `RUST_BACKTRACE` says, and exit status 1.
pub fn code<E: std::fmt::Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let line = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {line}");
            ExitCode::FAILURE
        }
    }
}
