//! Configuration: `key = value` lines with Apache Ozone's key names
//! (e.g. `ozone.client.verify.checksum = false`), plus overrides.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Client: verify checksums on read (default true).
pub const VERIFY_CHECKSUM: &str = "ozone.client.verify.checksum";
/// Client: bytes per checksum window for new keys (default 16KB).
pub const BYTES_PER_CHECKSUM: &str = "ozone.client.bytes.per.checksum";
/// Client: checksum type for new keys, CRC32C (default) or CRC32.
pub const CHECKSUM_TYPE: &str = "ozone.client.checksum.type";
/// Client: chunk size of writes (default 4MB).
pub const CHUNK_SIZE: &str = "ozone.scm.chunk.size";
/// OM: block size (default 256MB).
pub const BLOCK_SIZE: &str = "ozone.scm.block.size";
/// Client: replication of new keys, ONE or THREE (default THREE).
pub const REPLICATION: &str = "ozone.replication";
/// Client: OM address, host:port.
pub const OM_ADDRESS: &str = "ozone.om.address";
/// Datanode: heartbeat interval (default 3s).
pub const HEARTBEAT_INTERVAL: &str = "hdds.heartbeat.interval";
/// OM: a datanode silent this long is stale (default 30s).
pub const STALE_NODE_INTERVAL: &str = "ozone.scm.stale.node.interval";
/// OM: a datanode silent this long is dead (default 90s).
pub const DEAD_NODE_INTERVAL: &str = "ozone.scm.dead.node.interval";
/// Largest gRPC message accepted (default 64MB).
pub const MAX_MESSAGE_SIZE: &str = "ozone.grpc.max.message.size";
/// Datanode: verify checksums of every WriteChunk (default true).
pub const DATANODE_VERIFY_WRITES: &str = "hdds.datanode.verify.write.checksum";

/// Short-circuit socket directory, shared by every pod of a node.
pub const DOMAIN_SOCKET_PATH: &str = "ozone.domain.socket.path";
/// Client: read through short-circuit when a local datanode is found.
pub const READ_SHORT_CIRCUIT: &str = "ozone.client.read.short-circuit";
/// Datanode: skip the socket directory security check (development only).
pub const DOMAIN_SOCKET_SKIP_CHECK: &str = "ozone.domain.socket.path.skip.security.check";
/// Block tokens on (OM signs, datanodes check).
pub const BLOCK_TOKEN_ENABLED: &str = "hdds.block.token.enabled";
/// File holding the shared block-token secret (at least 32 bytes).
pub const BLOCK_TOKEN_SECRET_FILE: &str = "hdds.block.token.secret.file";
/// Lifetime of a block token (default 24h).
pub const BLOCK_TOKEN_EXPIRY: &str = "hdds.block.token.expiry.time";

/// A configuration value that could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path} line {line}: expected `key = value`, got {text:?}")]
    Syntax {
        path: String,
        line: usize,
        text: String,
    },
    #[error("config key {key}: invalid value {value:?}: {why}")]
    Value {
        key: String,
        value: String,
        why: String,
    },
}

/// A set of configuration keys and values.
#[derive(Debug, Clone, Default)]
pub struct Conf {
    values: BTreeMap<String, String>,
}

impl Conf {
    /// An empty configuration (every key at its default).
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads `key = value` lines; `#` starts a comment line.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses the text of a config file (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let mut conf = Self::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(ConfigError::Syntax {
                    path: origin.to_string(),
                    line: i + 1,
                    text: line.to_string(),
                });
            };
            conf.set(k.trim(), v.trim());
        }
        Ok(conf)
    }

    /// Applies `key=value` overrides (e.g. from `--set`).
    pub fn apply_overrides<S: AsRef<str>>(&mut self, items: &[S]) -> Result<(), ConfigError> {
        for item in items {
            let item = item.as_ref();
            let Some((k, v)) = item.split_once('=') else {
                return Err(ConfigError::Syntax {
                    path: "--set".into(),
                    line: 0,
                    text: item.to_string(),
                });
            };
            self.set(k.trim(), v.trim());
        }
        Ok(())
    }

    /// Sets one key.
    pub fn set(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        self.values.insert(key.to_string(), value.into());
        self
    }

    /// Raw value of a key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// All keys and values, sorted.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn err(key: &str, value: &str, why: impl Into<String>) -> ConfigError {
        ConfigError::Value {
            key: key.to_string(),
            value: value.to_string(),
            why: why.into(),
        }
    }

    /// A boolean (`true`/`false`).
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => Ok(true),
                "false" | "no" | "off" | "0" => Ok(false),
                _ => Err(Self::err(key, v, "expected true or false")),
            },
        }
    }

    /// A size in bytes: `4096`, `16KB`, `4MB`, `1GB` (binary multiples; `KiB`,
    /// `k` etc. accepted too).
    pub fn size(&self, key: &str, default: u64) -> Result<u64, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => parse_size(v).ok_or_else(|| {
                Self::err(key, v, "expected a size such as 16384, 16KB, 4MB or 1GB")
            }),
        }
    }

    /// A duration: `500ms`, `3s`, `5m`, `1h` (plain numbers are seconds).
    pub fn duration(&self, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => parse_duration(v)
                .ok_or_else(|| Self::err(key, v, "expected a duration such as 500ms, 3s or 5m")),
        }
    }

    /// A comma-separated list of numbers (empty when unset).
    pub fn u32_list(&self, key: &str) -> Result<Vec<u32>, ConfigError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(v) => v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse()
                        .map_err(|_| Self::err(key, v, "expected comma-separated numbers"))
                })
                .collect(),
        }
    }

    /// The block-token secret when block tokens are enabled.
    pub fn block_token_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        if !self.bool(BLOCK_TOKEN_ENABLED, false)? {
            return Ok(None);
        }
        let Some(path) = self.get(BLOCK_TOKEN_SECRET_FILE) else {
            return Err(Self::err(
                BLOCK_TOKEN_SECRET_FILE,
                "",
                "block tokens are enabled but no secret file is set",
            ));
        };
        let secret = std::fs::read(path)
            .map_err(|e| Self::err(BLOCK_TOKEN_SECRET_FILE, path, e.to_string()))?;
        let trimmed = secret.trim_ascii().to_vec();
        if trimmed.len() < 32 {
            return Err(Self::err(
                BLOCK_TOKEN_SECRET_FILE,
                path,
                "the secret must hold at least 32 bytes",
            ));
        }
        Ok(Some(trimmed))
    }

    /// One of a fixed set of words (case-insensitive); returns it uppercased.
    pub fn choice(
        &self,
        key: &str,
        default: &'static str,
        allowed: &[&str],
    ) -> Result<String, ConfigError> {
        match self.get(key) {
            None => Ok(default.to_string()),
            Some(v) => {
                let up = v.to_ascii_uppercase();
                if allowed.contains(&up.as_str()) {
                    Ok(up)
                } else {
                    Err(Self::err(
                        key,
                        v,
                        format!("expected one of {}", allowed.join(", ")),
                    ))
                }
            }
        }
    }
}

/// Parses sizes like `16KB`, `4MB`, `16k`, `1GiB`, `4096`.
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Parses durations like `500ms`, `3s`, `5m`, `1h`, `10` (seconds).
pub fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num.parse().ok()?;
    Some(match unit.trim() {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_and_values() {
        let c = Conf::parse(
            "# comment\nozone.client.verify.checksum = false\nozone.scm.chunk.size=4MB\nx = 500ms\n",
            "test",
        )
        .unwrap();
        assert!(!c.bool(VERIFY_CHECKSUM, true).unwrap());
        assert_eq!(c.size(CHUNK_SIZE, 0).unwrap(), 4 << 20);
        assert_eq!(
            c.duration("x", Duration::ZERO).unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(c.size("missing", 7).unwrap(), 7);
        assert!(Conf::parse("novalue\n", "t").is_err());
        let mut c = Conf::new();
        c.set(BYTES_PER_CHECKSUM, "lots");
        let e = c.size(BYTES_PER_CHECKSUM, 0).unwrap_err().to_string();
        assert!(e.contains(BYTES_PER_CHECKSUM), "{e}");
        assert_eq!(parse_size("16KB"), Some(16384));
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("99999999999999999999"), None);
        assert_eq!(parse_size("18446744073709551615GB"), None);
    }
}
