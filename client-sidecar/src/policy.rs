//! The workload policy: what a sidecar enforces for the application next to
//! it. Read from the config file (reloaded when it changes) and applied to
//! streams opened after the change.

use ozone_common::config::{self as keys, Conf, ConfigError};

/// Short-circuit mode (`ozone.client.read.short-circuit`).
pub use ozone_common::config::ShortCircuitMode as ShortCircuit;

/// The policy in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Default verify-checksum of new streams (`ozone.client.verify.checksum`).
    pub verify_checksum: bool,
    /// Whether a stream may override it.
    pub allow_verify_override: bool,
    /// Short-circuit mode (`ozone.client.read.short-circuit`: on, auto, off;
    /// true means auto, false off).
    pub short_circuit: ShortCircuit,
    /// Descriptor pass-through to the application.
    pub passthrough: bool,
}

impl Policy {
    /// The policy of `conf`; a bad value is an error naming the key.
    pub fn from_conf(conf: &Conf) -> Result<Self, ConfigError> {
        Ok(Self {
            verify_checksum: conf.value(&keys::VERIFY_CHECKSUM)?,
            allow_verify_override: conf.value(&keys::SIDECAR_VERIFY_OVERRIDE)?,
            short_circuit: conf.value(&keys::READ_SHORT_CIRCUIT)?,
            passthrough: conf.value(&keys::SIDECAR_PASSTHROUGH)?,
        })
    }

    /// Checks a stream's verify request; `Err` says why it is refused.
    pub fn stream_verify(&self, asked: Option<bool>) -> Result<bool, String> {
        match asked {
            None => Ok(self.verify_checksum),
            Some(v) if v == self.verify_checksum || self.allow_verify_override => Ok(v),
            Some(v) => Err(format!(
                "per-stream verify-checksum override refused: the workload policy sets \
                 {}={} and {}=false, so streams may not ask for verify-checksum={v}",
                keys::VERIFY_CHECKSUM.name,
                self.verify_checksum,
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
        assert!(p.verify_checksum && p.allow_verify_override && p.passthrough);
        assert_eq!(p.short_circuit, ShortCircuit::Auto);
        let c = Conf::parse(
            "ozone.client.verify.checksum = false\nozone.sidecar.verify.override.allowed = false\nozone.client.read.short-circuit = off\n",
            "t",
        )
        .unwrap();
        let p = Policy::from_conf(&c).unwrap();
        assert_eq!(p.short_circuit, ShortCircuit::Off);
        assert_eq!(p.stream_verify(None), Ok(false));
        assert_eq!(p.stream_verify(Some(false)), Ok(false));
        let e = p.stream_verify(Some(true)).unwrap_err();
        assert!(
            e.contains("ozone.sidecar.verify.override.allowed=false"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let c = Conf::parse("ozone.client.read.short-circuit = sometimes\n", "t").unwrap();
        let e = Policy::from_conf(&c).unwrap_err().to_string();
        assert!(e.contains("ozone.client.read.short-circuit"), "{e}");
    }
}
