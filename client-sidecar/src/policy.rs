//! What only a sidecar enforces for the application next to it: whether a
//! stream may override the verify-checksum setting, and descriptor
//! pass-through. The verify-checksum and short-circuit settings themselves
//! are the client's (`ozone.client.verify.checksum`,
//! `ozone.client.read.short-circuit`, read by `ClientConfig`). Read from the
//! config file (reloaded when it changes) and applied to streams opened
//! after the change.

use ozone_common::config::{self as keys, Conf, ConfigError};

/// The sidecar's own part of the workload policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Whether a stream may ask for another verify-checksum setting than
    /// the client's (`ozone.sidecar.verify.override.allowed`).
    pub allow_verify_override: bool,
    /// Descriptor pass-through to the application.
    pub passthrough: bool,
}

impl Policy {
    /// The policy of `conf`; a bad value is an error naming the key.
    pub fn from_conf(conf: &Conf) -> Result<Self, ConfigError> {
        Ok(Self {
            allow_verify_override: conf.value(&keys::SIDECAR_VERIFY_OVERRIDE)?,
            passthrough: conf.value(&keys::SIDECAR_PASSTHROUGH)?,
        })
    }

    /// The verify setting of a stream that asks for `asked` when the
    /// client's is `default`; `Err` says why it is refused.
    pub fn stream_verify(&self, default: bool, asked: Option<bool>) -> Result<bool, String> {
        match asked {
            None => Ok(default),
            Some(v) if v == default || self.allow_verify_override => Ok(v),
            Some(v) => Err(format!(
                "per-stream verify-checksum override refused: the workload policy sets \
                 {}={default} and {}=false, so streams may not ask for verify-checksum={v}",
                keys::VERIFY_CHECKSUM.name,
                keys::SIDECAR_VERIFY_OVERRIDE.name
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let p = Policy::from_conf(&Conf::new()).unwrap();
        assert!(p.allow_verify_override && p.passthrough);
        assert_eq!(p.stream_verify(true, Some(false)), Ok(false));
        let c = Conf::parse("ozone.sidecar.verify.override.allowed = false\n", "t").unwrap();
        let p = Policy::from_conf(&c).unwrap();
        assert_eq!(p.stream_verify(false, None), Ok(false));
        assert_eq!(p.stream_verify(false, Some(false)), Ok(false));
        let e = p.stream_verify(false, Some(true)).unwrap_err();
        assert!(
            e.contains("ozone.sidecar.verify.override.allowed=false"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let c = Conf::parse("ozone.sidecar.passthrough.enabled = sometimes\n", "t").unwrap();
        let e = Policy::from_conf(&c).unwrap_err().to_string();
        assert!(e.contains("ozone.sidecar.passthrough.enabled"), "{e}");
    }
}
