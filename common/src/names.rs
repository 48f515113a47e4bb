//! Volume, bucket and key names, and `/volume/bucket/key` paths.

/// A name or path that breaks the naming rules. The name is kept as
/// [`shown`] gives it: at most [`SHOWN_BYTES`] of it, so that an error about
/// a huge name is still a small message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NameError {
    #[error("invalid {what} name {name}: {why}")]
    Invalid {
        what: &'static str,
        name: String,
        why: &'static str,
    },
    #[error("invalid path {0}: expected {1}")]
    Path(String, &'static str),
}

/// The most of a name an error message quotes.
pub const SHOWN_BYTES: usize = 200;

/// `name` as error messages quote it: Rust-escaped (control characters
/// and terminal escapes become `\u{..}`), cut after [`SHOWN_BYTES`] bytes
/// with the full length said.
pub fn shown(name: &str) -> String {
    let cut = prefix(name, SHOWN_BYTES);
    if cut.len() == name.len() {
        return format!("{name:?}");
    }
    format!("{cut:?}... ({} bytes)", name.len())
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Whether `c` is a control character (C0, DEL or C1): refused in key
/// names and paths, so that no listing prints a terminal escape.
fn is_control(c: char) -> bool {
    c.is_control()
}

/// Checks a volume or bucket name: 3-63 characters of lowercase letters,
/// digits, '-' and '.', starting and ending with a letter or digit (as in
/// Apache Ozone and S3).
pub fn check_resource_name(what: &'static str, name: &str) -> Result<(), NameError> {
    let bad = |why| {
        Err(NameError::Invalid {
            what,
            name: shown(name),
            why,
        })
    };
    if name.len() < 3 || name.len() > 63 {
        return bad("length must be 3 to 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return bad("only lowercase letters, digits, '-' and '.' are allowed");
    }
    let first = name.as_bytes()[0];
    let last = name.as_bytes()[name.len() - 1];
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return bad("must start and end with a letter or digit");
    }
    Ok(())
}

/// Checks a key name: 1-1024 bytes, no control characters, not starting
/// with '/'.
pub fn check_key_name(name: &str) -> Result<(), NameError> {
    let bad = |why| {
        Err(NameError::Invalid {
            what: "key",
            name: shown(name),
            why,
        })
    };
    if name.is_empty() || name.len() > 1024 {
        return bad("length must be 1 to 1024 bytes");
    }
    if name.chars().any(is_control) {
        return bad("must not contain control characters (NUL, newline, escape, ...)");
    }
    if name.starts_with('/') {
        return bad("must not start with '/'");
    }
    if name.split('/').any(|seg| seg == "." || seg == "..") {
        // Such a name would lead a `key get` into a directory, or an
        // `ozone fs` path, somewhere else.
        return bad("must not have '.' or '..' path segments");
    }
    Ok(())
}

/// The components of a path inside a file-system bucket (`dir/sub/file`;
/// leading and trailing '/' are ignored; the empty path is the bucket's
/// root). Components are 1-255 bytes, not `.` or `..`, without control characters; the
/// whole path at most 1024 bytes.
pub fn fs_components(path: &str) -> Result<Vec<&str>, NameError> {
    let bad = |why| {
        Err(NameError::Invalid {
            what: "path",
            name: shown(path),
            why,
        })
    };
    if path.len() > 1024 {
        return bad("length must be at most 1024 bytes");
    }
    if path.chars().any(is_control) {
        return bad("must not contain control characters (NUL, newline, escape, ...)");
    }
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    let parts: Vec<&str> = trimmed.split('/').collect();
    for p in &parts {
        if p.is_empty() {
            return bad("must not contain an empty component ('//')");
        }
        if *p == "." || *p == ".." {
            return bad("must not contain '.' or '..' components");
        }
        if p.len() > 255 {
            return bad("components must be at most 255 bytes");
        }
    }
    Ok(parts)
}

/// Splits `/volume[/bucket[/key]]` into its checked parts ("" parts are
/// absent).
fn split(path: &str) -> Result<(&str, Option<&str>, Option<&str>), NameError> {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let mut parts = rest.splitn(3, '/');
    let volume = parts.next().unwrap_or_default();
    check_resource_name("volume", volume)?;
    let bucket = parts.next().filter(|b| !b.is_empty());
    if let Some(b) = bucket {
        check_resource_name("bucket", b)?;
    }
    let key = parts.next().filter(|k| !k.is_empty());
    if let Some(k) = key {
        check_key_name(k)?;
    }
    Ok((volume, bucket, key))
}

/// A parsed `/volume[/bucket[/key]]` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OzonePath {
    pub volume: String,
    pub bucket: Option<String>,
    pub key: Option<String>,
}

impl OzonePath {
    /// Parses `/vol`, `/vol/bucket` or `/vol/bucket/key/with/slashes`.
    pub fn parse(path: &str) -> Result<Self, NameError> {
        let (volume, bucket, key) = split(path)?;
        Ok(Self {
            volume: volume.to_string(),
            bucket: bucket.map(str::to_string),
            key: key.map(str::to_string),
        })
    }

    /// Requires `/volume/bucket`.
    pub fn bucket_path(path: &str) -> Result<(String, String), NameError> {
        let p = Self::parse(path)?;
        match (p.bucket, p.key) {
            (Some(b), None) => Ok((p.volume, b)),
            _ => Err(NameError::Path(shown(path), "/volume/bucket")),
        }
    }
}

/// The path of a key, or of a file or directory in a file-system bucket:
/// `/volume/bucket/key`. Borrowed and `Copy`; the client calls take one
/// instead of three strings. An empty `key` is the bucket itself (its root
/// directory, or every key when listing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyPath<'a> {
    pub volume: &'a str,
    pub bucket: &'a str,
    pub key: &'a str,
}

impl<'a> From<&'a ozone_proto::FsPath> for KeyPath<'a> {
    /// The path of a file-system request.
    fn from(p: &'a ozone_proto::FsPath) -> Self {
        Self::new(&p.volume, &p.bucket, &p.path)
    }
}

impl<'a> KeyPath<'a> {
    /// Volume, bucket and key, in that order.
    pub const fn parts(self) -> (&'a str, &'a str, &'a str) {
        (self.volume, self.bucket, self.key)
    }

    /// The path of `key` in `/volume/bucket` (not checked: the OM checks
    /// names on every call).
    pub const fn new(volume: &'a str, bucket: &'a str, key: &'a str) -> Self {
        Self {
            volume,
            bucket,
            key,
        }
    }

    /// Parses `/volume/bucket/key/with/slashes`, checking each name.
    pub fn parse(path: &'a str) -> Result<Self, NameError> {
        match split(path)? {
            (volume, Some(bucket), Some(key)) => Ok(Self::new(volume, bucket, key)),
            _ => Err(NameError::Path(shown(path), "/volume/bucket/key")),
        }
    }

    /// Another key of the same bucket.
    pub const fn with_key(self, key: &'a str) -> Self {
        Self { key, ..self }
    }
}

impl std::fmt::Display for KeyPath<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{}/{}/{}", self.volume, self.bucket, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_system_paths_split_into_checked_components() {
        assert_eq!(fs_components("").unwrap(), Vec::<&str>::new());
        assert_eq!(fs_components("/").unwrap(), Vec::<&str>::new());
        assert_eq!(fs_components("a/b/c").unwrap(), ["a", "b", "c"]);
        assert_eq!(fs_components("/a/b/").unwrap(), ["a", "b"]);
        for bad in ["a//b", "a/./b", "../a", "a/..", "a\0b"] {
            assert!(fs_components(bad).is_err(), "{bad:?}");
        }
        assert!(fs_components(&"x".repeat(256)).is_err());
        assert!(fs_components(&"x/".repeat(600)).is_err());
    }

    #[test]
    fn control_characters_are_refused_and_huge_names_shown_short() {
        for bad in ["a\nb", "a\x1b[31mred", "tab\there", "del\x7f", "c1\u{9b}2J"] {
            assert!(check_key_name(bad).is_err(), "{bad:?}");
            assert!(fs_components(bad).is_err(), "{bad:?}");
        }
        assert!(check_key_name("caf\u{e9}/\u{65e5}\u{672c}").is_ok());
        let huge = "k".repeat(1 << 20);
        let e = check_key_name(&huge).unwrap_err().to_string();
        assert!(e.len() < 400, "{} bytes: {e:.100}", e.len());
        assert!(e.contains("1048576 bytes"), "{e:.300}");
        let e = fs_components(&huge).unwrap_err().to_string();
        assert!(e.len() < 400, "{} bytes", e.len());
        let e = KeyPath::parse(&format!("/{huge}")).unwrap_err().to_string();
        assert!(e.len() < 400, "{} bytes", e.len());
        // Cut on a character boundary.
        let wide = "\u{e9}".repeat(300);
        assert!(shown(&wide).contains("600 bytes"));
        // Escaped, never raw.
        let e = check_key_name("a\x1b]0;pwn\x07").unwrap_err().to_string();
        assert!(!e.contains('\x1b') && !e.contains('\x07'), "{e}");
    }

    #[test]
    fn paths() {
        let k = KeyPath::parse("/vol1/bucket-a/dir/file.txt").unwrap();
        assert_eq!(k, KeyPath::new("vol1", "bucket-a", "dir/file.txt"));
        assert_eq!(k.to_string(), "/vol1/bucket-a/dir/file.txt");
        assert_eq!(k.with_key("x").key, "x");
        assert_eq!(
            OzonePath::bucket_path("/vol1/b12").unwrap(),
            ("vol1".into(), "b12".into())
        );
        assert!(KeyPath::parse("/vol1/b12").is_err());
        assert!(KeyPath::parse("/vol1/b12/").is_err());
        assert!(KeyPath::parse("/Vol1/b12/k").is_err());
        assert!(OzonePath::parse("/Vol").is_err());
        assert!(OzonePath::parse("/v").is_err());
        assert!(OzonePath::parse("/vol/-bad").is_err());
        assert!(check_key_name("a\0b").is_err());
        for bad in ["../../etc/passwd", "a/../b", "./a", "a/.", ".."] {
            assert!(check_key_name(bad).is_err(), "{bad}");
        }
        for good in ["a..b", ".hidden", "a/.b/c", "...", "a//b"] {
            assert!(check_key_name(good).is_ok(), "{good}");
        }
    }
}
