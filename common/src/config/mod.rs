//! Configuration: `key = value` lines with Apache Ozone's key names
//! (e.g. `ozone.client.verify.checksum = false`), plus overrides.

use std::collections::BTreeMap;
use std::path::Path;

pub mod keys;
pub mod value;

pub use keys::*;
pub use value::{
    Bytes, ChecksumAlgorithm, Ids, Names, Paths, ReplicationFactor, ShortCircuitMode, Value,
    parse_duration, parse_size,
};

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Not set: the declared default.
    Default,
    /// A config file (its path).
    File(String),
    /// A `--set key=value` override.
    Set,
    /// An environment variable, read by the binary's entry point.
    Env(&'static str),
    /// A command-line flag of the binary.
    Flag(&'static str),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::File(p) => write!(f, "file {p}"),
            Source::Set => write!(f, "--set"),
            Source::Env(v) => write!(f, "env {v}"),
            Source::Flag(n) => write!(f, "flag {n}"),
        }
    }
}

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
    #[error("config key {key} is not set and has no default")]
    Missing { key: String },
}

/// A set of configuration keys and values, each with its source.
#[derive(Debug, Clone, Default)]
pub struct Conf {
    values: BTreeMap<String, (String, Source)>,
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
            conf.set_from(k.trim(), v.trim(), Source::File(origin.to_string()));
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
            self.set_from(k.trim(), v.trim(), Source::Set);
        }
        Ok(())
    }

    /// Sets one key (as `--set` would).
    pub fn set(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        self.set_from(key, value, Source::Set)
    }

    /// Sets one key, recording where the value came from.
    pub fn set_from(&mut self, key: &str, value: impl Into<String>, source: Source) -> &mut Self {
        self.values.insert(key.to_string(), (value.into(), source));
        self
    }

    /// The text of a key as set, if it is.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|(v, _)| v.as_str())
    }

    /// Where a key's value comes from.
    pub fn source(&self, key: &str) -> Source {
        self.values
            .get(key)
            .map(|(_, s)| s.clone())
            .unwrap_or(Source::Default)
    }

    /// All keys set and their values, sorted.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values
            .iter()
            .map(|(k, (v, _))| (k.as_str(), v.as_str()))
    }

    fn err(key: &str, value: &str, why: impl Into<String>) -> ConfigError {
        ConfigError::Value {
            key: key.to_string(),
            value: value.to_string(),
            why: why.into(),
        }
    }

    /// The value of `key`: as set, else its declared default. A value that
    /// does not parse is an error naming the key, the value and what is
    /// allowed.
    pub fn value<T: Value>(&self, key: &Key<T>) -> Result<T, ConfigError> {
        match self.opt(key)? {
            Some(v) => Ok(v),
            None => {
                let d = key.default.ok_or_else(|| ConfigError::Missing {
                    key: key.name.to_string(),
                })?;
                T::parse(d).ok_or_else(|| Self::err(key.name, d, T::ALLOWED))
            }
        }
    }

    /// The value of `key` when set (an empty value counts as unset).
    pub fn opt<T: Value>(&self, key: &Key<T>) -> Result<Option<T>, ConfigError> {
        match self.raw(key.name).map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => T::parse(v)
                .map(Some)
                .ok_or_else(|| Self::err(key.name, v, format!("expected {}", T::ALLOWED))),
        }
    }

    /// Keys set that no role reads, each with the declared key closest to
    /// it (a likely typo).
    pub fn unknown(&self) -> Vec<(&str, Option<&'static str>)> {
        self.values
            .keys()
            .filter(|k| keys::find(k).is_none())
            .map(|k| (k.as_str(), keys::closest(k)))
            .collect()
    }

    /// A warning for each unknown key, naming where it was set and the
    /// closest known key.
    pub fn unknown_warnings(&self) -> Vec<String> {
        self.unknown()
            .into_iter()
            .map(|(key, near)| {
                let source = self.source(key);
                match near {
                    Some(n) => {
                        format!("unknown config key {key} ({source}): did you mean {n}? (ignored)")
                    }
                    None => format!("unknown config key {key} ({source}) (ignored)"),
                }
            })
            .collect()
    }

    /// Logs [`Self::unknown_warnings`].
    pub fn warn_unknown(&self) {
        for w in self.unknown_warnings() {
            tracing::warn!("{w}");
        }
    }

    /// Checks every known key that is set against its declared type.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (k, v) in self.iter() {
            if let Some(def) = keys::find(k)
                && !v.trim().is_empty()
                && !(def.valid)(v)
            {
                return Err(Self::err(k, v, format!("expected {}", def.allowed)));
            }
        }
        Ok(())
    }

    /// The effective configuration of `role`: every key it reads with its
    /// value (as set, or the default) and the value's source.
    pub fn effective(&self, role: Role) -> Vec<(&'static KeyDef, Option<String>, Source)> {
        keys::ALL
            .iter()
            .filter(|k| k.roles.contains(&role))
            .map(|k| match self.values.get(k.name) {
                Some((v, s)) => (k, Some(v.clone()), s.clone()),
                None => (k, k.default.map(str::to_string), Source::Default),
            })
            .collect()
    }

    /// The path in `path` when the switch `on` is set (an error when it is
    /// set without a path, saying `missing`).
    fn path_if_on(
        &self,
        on: &Key<bool>,
        path: &Key<std::path::PathBuf>,
        missing: &str,
    ) -> Result<Option<std::path::PathBuf>, ConfigError> {
        if !self.value(on)? {
            return Ok(None);
        }
        match self.opt(path)? {
            Some(p) => Ok(Some(p)),
            None => Err(Self::err(path.name, "", missing)),
        }
    }

    /// The TLS settings when `hdds.grpc.tls.enabled`: the directory
    /// loaded for a server (certificate and key required) or a client.
    pub fn tls(&self, server: bool) -> Result<Option<crate::tls::Tls>, ConfigError> {
        let missing = "TLS is enabled but no certificate directory is set";
        let Some(dir) = self.path_if_on(&GRPC_TLS_ENABLED, &GRPC_TLS_DIR, missing)? else {
            return Ok(None);
        };
        crate::tls::Tls::load(&dir, server)
            .map(Some)
            .map_err(|e| Self::err(GRPC_TLS_DIR.name, &dir.display().to_string(), e.to_string()))
    }

    /// The block-token secret when block tokens are enabled.
    pub fn block_token_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        let name = BLOCK_TOKEN_SECRET_FILE.name;
        let missing = "block tokens are enabled but no secret file is set";
        let Some(path) =
            self.path_if_on(&BLOCK_TOKEN_ENABLED, &BLOCK_TOKEN_SECRET_FILE, missing)?
        else {
            return Ok(None);
        };
        let shown = path.display().to_string();
        let secret = std::fs::read(&path).map_err(|e| Self::err(name, &shown, e.to_string()))?;
        let trimmed = secret.trim_ascii().to_vec();
        if trimmed.len() < 32 {
            return Err(Self::err(
                name,
                &shown,
                "the secret must hold at least 32 bytes",
            ));
        }
        Ok(Some(trimmed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_and_values() {
        let c = Conf::parse(
            "# comment\nozone.client.verify.checksum = false\nozone.scm.chunk.size=4MB\n",
            "test",
        )
        .unwrap();
        assert!(!c.value(&VERIFY_CHECKSUM).unwrap());
        assert_eq!(c.value(&CHUNK_SIZE).unwrap(), Bytes(4 << 20));
        assert_eq!(c.value(&BLOCK_SIZE).unwrap(), Bytes(256 << 20), "default");
        assert_eq!(c.source(VERIFY_CHECKSUM.name), Source::File("test".into()));
        assert_eq!(c.source(BLOCK_SIZE.name), Source::Default);
        assert!(c.opt(&OM_ADDRESS).unwrap().is_none());
        let e = c.value(&OM_ADDRESS).unwrap_err().to_string();
        assert!(e.contains("ozone.om.address"), "{e}");
        assert!(Conf::parse("novalue\n", "t").is_err());
        let mut c = Conf::new();
        c.set(BYTES_PER_CHECKSUM.name, "lots");
        let e = c.value(&BYTES_PER_CHECKSUM).unwrap_err().to_string();
        assert!(
            e.contains(BYTES_PER_CHECKSUM.name) && e.contains("lots") && e.contains("16KB"),
            "{e}"
        );
        assert!(c.validate().is_err());
        assert_eq!(c.source(BYTES_PER_CHECKSUM.name), Source::Set);
    }

    #[test]
    fn unknown_keys_name_the_closest() {
        let c = Conf::parse(
            "ozone.client.verfy.checksum = false\nozone.client.verify.checksum = true\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            c.unknown(),
            vec![(
                "ozone.client.verfy.checksum",
                Some("ozone.client.verify.checksum")
            )]
        );
    }

    #[test]
    fn effective_config_of_a_role() {
        let mut c = Conf::new();
        c.apply_overrides(&["ozone.client.verify.checksum=false"])
            .unwrap();
        let e = c.effective(Role::Client);
        let (_, v, s) = e
            .iter()
            .find(|(k, _, _)| k.name == VERIFY_CHECKSUM.name)
            .unwrap();
        assert_eq!((v.as_deref(), s), (Some("false"), &Source::Set));
        let (_, v, s) = e
            .iter()
            .find(|(k, _, _)| k.name == CHUNK_SIZE.name)
            .unwrap();
        assert_eq!((v.as_deref(), s), (Some("4MB"), &Source::Default));
        assert!(e.iter().all(|(k, _, _)| k.roles.contains(&Role::Client)));
        assert!(!e.iter().any(|(k, _, _)| k.name == BLOCK_SIZE.name));
    }
}
