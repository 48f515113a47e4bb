//! The workload policy: what a sidecar enforces for the application next to
//! it. Read from the config file (reloaded when it changes) and applied to
//! streams opened after the change.

use ozone_common::config::{self as keys, Conf, ConfigError};

/// Streams may ask for another verify-checksum setting than the default.
pub const ALLOW_VERIFY_OVERRIDE: &str = "ozone.sidecar.verify.override.allowed";
/// Block descriptors may be handed to the application (pass-through).
pub const PASSTHROUGH: &str = "ozone.sidecar.passthrough.enabled";

/// Short-circuit mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShortCircuit {
    /// Read local replicas through the datanode socket; warn when none is
    /// found.
    On,
    /// Read local replicas through the socket when a datanode is there.
    Auto,
    /// Never: gRPC only.
    Off,
}

impl ShortCircuit {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ShortCircuit::On => "on",
            ShortCircuit::Auto => "auto",
            ShortCircuit::Off => "off",
        }
    }
}

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
        let sc = match conf
            .choice(
                keys::READ_SHORT_CIRCUIT,
                "AUTO",
                &["ON", "AUTO", "OFF", "TRUE", "FALSE"],
            )?
            .as_str()
        {
            "ON" => ShortCircuit::On,
            "OFF" | "FALSE" => ShortCircuit::Off,
            _ => ShortCircuit::Auto,
        };
        Ok(Self {
            verify_checksum: conf.bool(keys::VERIFY_CHECKSUM, true)?,
            allow_verify_override: conf.bool(ALLOW_VERIFY_OVERRIDE, true)?,
            short_circuit: sc,
            passthrough: conf.bool(PASSTHROUGH, true)?,
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
                keys::VERIFY_CHECKSUM,
                self.verify_checksum,
                ALLOW_VERIFY_OVERRIDE
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
