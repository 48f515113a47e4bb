//! Client tokens from a file, for local clusters and tests: lines
//! `token,namespace/serviceaccount[,expiry-unix-seconds]`, `#` comments.
//! The file is read again when it changes.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use tonic::Status;

use super::acl::check_identity;

/// A token file, re-read when its modification time changes.
pub(crate) struct StaticTokens {
    path: PathBuf,
    loaded: Mutex<Option<(SystemTime, Vec<Entry>)>>,
}

#[derive(Clone)]
struct Entry {
    token: String,
    identity: String,
    expiry_ms: Option<u64>,
}

impl StaticTokens {
    /// Tokens of the file at `path`.
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            loaded: Mutex::new(None),
        }
    }

    fn parse(text: &str) -> Result<Vec<Entry>, String> {
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let bad = |why: &str| format!("line {}: {why}", n + 1);
            if f.len() < 2 || f.len() > 3 || f[0].is_empty() {
                return Err(bad("expected token,namespace/serviceaccount[,expiry]"));
            }
            check_identity(f[1]).map_err(|e| bad(&e))?;
            let expiry_ms = match f.get(2) {
                Some(s) => Some(
                    s.parse::<u64>()
                        .map_err(|_| bad("expiry is not seconds since the epoch"))?
                        * 1000,
                ),
                None => None,
            };
            out.push(Entry {
                token: f[0].to_string(),
                identity: f[1].to_string(),
                expiry_ms,
            });
        }
        Ok(out)
    }

    fn entries(&self) -> Result<Vec<Entry>, Status> {
        let unreadable = |e: String| {
            tracing::error!(file = %self.path.display(), "token file: {e}");
            Status::unavailable(format!(
                "the OM cannot read its token file {}: {e}",
                self.path.display()
            ))
        };
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(|e| unreadable(e.to_string()))?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, entries)) = &*loaded
            && *at == mtime
        {
            return Ok(entries.clone());
        }
        let text = std::fs::read_to_string(&self.path).map_err(|e| unreadable(e.to_string()))?;
        let entries = Self::parse(&text).map_err(unreadable)?;
        *loaded = Some((mtime, entries.clone()));
        Ok(entries)
    }

    /// The identity of `token` and when it expires.
    pub(crate) fn check(&self, token: &str) -> Result<(String, Option<u64>), Status> {
        let entries = self.entries()?;
        // Compared in full for every entry: no early exit on a prefix.
        let found = entries
            .iter()
            .fold(None, |found, e| {
                if constant_time_eq(e.token.as_bytes(), token.as_bytes()) {
                    Some(e)
                } else {
                    found
                }
            })
            .ok_or_else(|| Status::unauthenticated("unknown token"))?;
        if let Some(exp) = found.expiry_ms
            && exp <= ozone_common::now_ms()
        {
            return Err(Status::unauthenticated("the token has expired"));
        }
        Ok((found.identity.clone(), found.expiry_ms))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_lines() {
        let e = StaticTokens::parse("# c\n\nabc, ns/sa\nxyz,ns/b,12\n").unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].expiry_ms, Some(12_000));
        for bad in ["abc", "abc,nobody", "abc,ns/sa,soon", ",ns/sa"] {
            assert!(StaticTokens::parse(bad).is_err(), "{bad}");
        }
    }
}
