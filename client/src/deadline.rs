//! Deadlines on datanode calls: a stopped or hung datanode (its socket
//! open, nothing answered) fails the call instead of stalling the client,
//! which moves on to another replica.

use std::future::Future;
use std::time::Duration;

pub(crate) use ozone_common::config::{READ_TIMEOUT, WRITE_TIMEOUT};

/// `call`'s result, or DEADLINE_EXCEEDED once `limit` has passed without
/// one; `key` names the setting in the message.
pub(crate) async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
    key: &str,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "no answer within {limit:?} ({key})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_past_its_deadline_fails_with_the_key_named() {
        let stalled = std::future::pending::<Result<(), tonic::Status>>();
        let e = within(Duration::from_millis(20), stalled, "k.timeout")
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::DeadlineExceeded);
        assert!(e.message().contains("k.timeout"), "{e}");
        let quick = async { Ok::<_, tonic::Status>(7) };
        assert_eq!(within(Duration::from_secs(5), quick, "k").await.unwrap(), 7);
    }
}
