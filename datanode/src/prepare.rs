//! The root init step of a datanode pod: hands the hostPath directories that
//! kubelet created root-owned to the datanode's user, never world-writable,
//! and checks the socket directory the way the datanode will.
//!
//! Paths arrive as arguments (no shell), so nothing in them is interpreted.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use nix::unistd::{Gid, Uid, chown};

/// Why a directory could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// `--owner` is not `UID:GID`.
    #[error("owner {0:?} must be UID:GID with numeric ids")]
    Owner(String),
    /// The path is not absolute or not normalized.
    #[error("{0} must be an absolute, normalized path")]
    Path(String),
    /// The path exists and is not a directory (or is a symlink).
    #[error("{0} exists and is not a directory (symlinks are refused)")]
    NotDirectory(String),
    /// A system call failed.
    #[error("{what} {path}: {error}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: String,
        /// The error.
        error: String,
    },
    /// The socket directory would fail the datanode's own check.
    #[error(transparent)]
    Unsafe(#[from] crate::socket_path::PathSecurityError),
}

/// Parses `UID:GID`.
pub fn parse_owner(s: &str) -> Result<(u32, u32), PrepareError> {
    let (u, g) = s
        .split_once(':')
        .ok_or_else(|| PrepareError::Owner(s.into()))?;
    match (u.parse(), g.parse()) {
        (Ok(u), Ok(g)) => Ok((u, g)),
        _ => Err(PrepareError::Owner(s.into())),
    }
}

/// Creates `dir` (and missing parents, root-owned 0755) unless it exists,
/// then makes it owned by `uid:gid` with `mode`.
pub fn prepare_dir(dir: &Path, uid: u32, gid: u32, mode: u32) -> Result<(), PrepareError> {
    let shown = dir.display().to_string();
    if !dir.is_absolute()
        || dir.components().any(|c| {
            matches!(
                c,
                std::path::Component::ParentDir | std::path::Component::CurDir
            )
        })
    {
        return Err(PrepareError::Path(shown));
    }
    let io = |what: &'static str, e: std::io::Error| PrepareError::Io {
        what,
        path: shown.clone(),
        error: e.to_string(),
    };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(PrepareError::NotDirectory(shown)),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| io("creating", e))?,
        Err(e) => return Err(io("inspecting", e)),
    }
    chown(dir, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))).map_err(|e| {
        PrepareError::Io {
            what: "chown",
            path: shown.clone(),
            error: e.to_string(),
        }
    })?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io("chmod", e))?;
    Ok(())
}

/// Prepares the socket directory (0755: others may connect, not replace)
/// and the data directory (0750), then checks the socket directory as the
/// datanode's user will.
pub fn prepare(
    uid: u32,
    gid: u32,
    socket_dir: Option<&Path>,
    data_dir: Option<&Path>,
) -> Result<(), PrepareError> {
    if let Some(d) = socket_dir {
        prepare_dir(d, uid, gid, 0o755)?;
        crate::socket_path::check_as(d, uid)?;
    }
    if let Some(d) = data_dir {
        prepare_dir(d, uid, gid, 0o750)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn creates_owns_and_refuses_bad_paths() {
        let t = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let d = t.path().join("a/b");
        prepare_dir(&d, me, gid, 0o750).unwrap();
        let m = std::fs::metadata(&d).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (me, 0o750));
        // Again: idempotent.
        prepare_dir(&d, me, gid, 0o755).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o755);
        let f = t.path().join("file");
        std::fs::write(&f, b"x").unwrap();
        assert!(matches!(
            prepare_dir(&f, me, gid, 0o755),
            Err(PrepareError::NotDirectory(_))
        ));
        let l = t.path().join("link");
        std::os::unix::fs::symlink(&d, &l).unwrap();
        assert!(matches!(
            prepare_dir(&l, me, gid, 0o755),
            Err(PrepareError::NotDirectory(_))
        ));
        assert!(matches!(
            prepare_dir(Path::new("relative"), me, gid, 0o755),
            Err(PrepareError::Path(_))
        ));
        assert!(matches!(
            prepare_dir(&t.path().join("x/../y"), me, gid, 0o755),
            Err(PrepareError::Path(_))
        ));
        assert_eq!(parse_owner("1000:1000").unwrap(), (1000, 1000));
        assert!(parse_owner("root").is_err());
        assert!(parse_owner("1000:x").is_err());
    }
}
