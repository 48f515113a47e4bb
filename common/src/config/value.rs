//! The value types of configuration keys: how a value is written and parsed.

use std::path::PathBuf;
use std::time::Duration;

/// A type a key's value parses into.
pub trait Value: Sized {
    /// Name of the type in listings (`bool`, `size`, `duration`, ...).
    const KIND: &'static str;
    /// What a valid value looks like, for error messages and listings.
    const ALLOWED: &'static str;
    /// Parses a value as written in a file or `--set`.
    fn parse(text: &str) -> Option<Self>;
}

impl Value for bool {
    const KIND: &'static str = "bool";
    const ALLOWED: &'static str = "true or false";
    fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Some(true),
            "false" | "no" | "off" | "0" => Some(false),
            _ => None,
        }
    }
}

/// A size in bytes: `4096`, `16KB`, `4MB`, `1GB` (binary multiples).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl Value for Bytes {
    const KIND: &'static str = "size";
    const ALLOWED: &'static str = "a size such as 16384, 16KB, 4MB or 1GB";
    fn parse(text: &str) -> Option<Self> {
        parse_size(text).map(Bytes)
    }
}

impl Value for u64 {
    const KIND: &'static str = "count";
    const ALLOWED: &'static str = "a whole number";
    fn parse(text: &str) -> Option<Self> {
        text.trim().parse().ok()
    }
}

impl Value for Duration {
    const KIND: &'static str = "duration";
    const ALLOWED: &'static str = "a duration such as 500ms, 3s, 5m, 1h or 7d";
    fn parse(text: &str) -> Option<Self> {
        parse_duration(text)
    }
}

impl Value for String {
    const KIND: &'static str = "string";
    const ALLOWED: &'static str = "any text";
    fn parse(text: &str) -> Option<Self> {
        Some(text.trim().to_string())
    }
}

impl Value for PathBuf {
    const KIND: &'static str = "path";
    const ALLOWED: &'static str = "an absolute path";
    fn parse(text: &str) -> Option<Self> {
        let p = PathBuf::from(text.trim());
        p.is_absolute().then_some(p)
    }
}

/// Comma-separated items, each parsed by `item`; `None` if any fails.
fn list<T>(text: &str, item: impl Fn(&str) -> Option<T>) -> Option<Vec<T>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(item)
        .collect()
}

/// Comma-separated absolute paths.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Paths(pub Vec<PathBuf>);

impl Value for Paths {
    const KIND: &'static str = "paths";
    const ALLOWED: &'static str = "comma-separated absolute paths";
    fn parse(text: &str) -> Option<Self> {
        list(text, <PathBuf as Value>::parse)
            .filter(|v| !v.is_empty())
            .map(Paths)
    }
}

/// Comma-separated ids (uids, gids); empty means none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ids(pub Vec<u32>);

impl Value for Ids {
    const KIND: &'static str = "ids";
    const ALLOWED: &'static str = "comma-separated numbers";
    fn parse(text: &str) -> Option<Self> {
        list(text, |s| s.parse().ok()).map(Ids)
    }
}

/// Comma-separated names (identities, namespaces); empty means none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Names(pub Vec<String>);

impl Value for Names {
    const KIND: &'static str = "names";
    const ALLOWED: &'static str = "comma-separated names";
    fn parse(text: &str) -> Option<Self> {
        list(text, |s| Some(s.to_string())).map(Names)
    }
}

/// Declares an enum whose values are fixed words (case-insensitive).
macro_rules! word_enum {
    ($(#[$m:meta])* $name:ident, $allowed:literal { $($(#[$vm:meta])* $variant:ident = [$($word:literal),+]),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vm])* $variant),+
        }
        impl Value for $name {
            const KIND: &'static str = "choice";
            const ALLOWED: &'static str = $allowed;
            fn parse(text: &str) -> Option<Self> {
                let t = text.trim().to_ascii_lowercase();
                $(if [$($word),+].contains(&t.as_str()) { return Some($name::$variant); })+
                None
            }
        }
    };
}

word_enum!(
    /// `ozone.client.read.short-circuit`: `on`, `auto` (also `true`) or
    /// `off` (also `false`).
    ShortCircuitMode, "on, auto or off (true means auto, false off)" {
        /// Read local replicas through the datanode socket; warn when none is found.
        On = ["on"],
        /// Read local replicas through the socket when a datanode is there.
        Auto = ["auto", "true"],
        /// Never: gRPC only.
        Off = ["off", "false"],
    }
);

impl ShortCircuitMode {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ShortCircuitMode::On => "on",
            ShortCircuitMode::Auto => "auto",
            ShortCircuitMode::Off => "off",
        }
    }
}

word_enum!(
    /// `ozone.client.checksum.type`.
    ChecksumAlgorithm, "CRC32C, CRC32 or NONE" {
        /// CRC-32C (Castagnoli).
        Crc32c = ["crc32c"],
        /// CRC-32 (IEEE).
        Crc32 = ["crc32"],
        /// No checksums.
        None = ["none"],
    }
);

word_enum!(
    /// `ozone.replication`.
    ReplicationFactor, "ONE or THREE (also 1 or 3)" {
        /// One replica.
        One = ["one", "1"],
        /// Three replicas.
        Three = ["three", "3"],
    }
);

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
        "d" => Duration::from_secs(n.checked_mul(86_400)?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse() {
        assert_eq!(parse_size("16KB"), Some(16384));
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("99999999999999999999"), None);
        assert_eq!(parse_size("18446744073709551615GB"), None);
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("fast"), None);
        assert_eq!(<bool as Value>::parse("Yes"), Some(true));
        assert_eq!(<bool as Value>::parse("maybe"), None);
        assert_eq!(
            ShortCircuitMode::parse("AUTO"),
            Some(ShortCircuitMode::Auto)
        );
        assert_eq!(
            ShortCircuitMode::parse("true"),
            Some(ShortCircuitMode::Auto)
        );
        assert_eq!(
            ShortCircuitMode::parse("false"),
            Some(ShortCircuitMode::Off)
        );
        assert_eq!(ShortCircuitMode::parse("sometimes"), None);
        assert_eq!(
            ReplicationFactor::parse("3"),
            Some(ReplicationFactor::Three)
        );
        assert_eq!(
            ChecksumAlgorithm::parse("crc32C"),
            Some(ChecksumAlgorithm::Crc32c)
        );
        assert_eq!(Ids::parse(" 1000, 2000 "), Some(Ids(vec![1000, 2000])));
        assert_eq!(Ids::parse(""), Some(Ids(vec![])));
        assert_eq!(Ids::parse("1,x"), None);
        assert_eq!(<PathBuf as Value>::parse("relative/dir"), None);
        assert_eq!(
            Paths::parse("/a, /b"),
            Some(Paths(vec!["/a".into(), "/b".into()]))
        );
        assert_eq!(Paths::parse("/a,b"), None);
    }
}
