//! Security check of the short-circuit socket directory, as HDFS does it:
//! a process that can replace the socket could impersonate the datanode,
//! so no component of the path may be writable by others.
//!
//! Every component from `/` down must be owned by root or by this
//! process's user, must not be world-writable, and may be group-writable
//! only when owned by root (user and group).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A path component that fails the check.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PathSecurityError {
    #[error(
        "socket path component {path} is world-writable (mode {mode:04o}); run `chmod o-w {path}` or choose another ozone.domain.socket.path"
    )]
    WorldWritable { path: String, mode: u32 },
    #[error(
        "socket path component {path} is group-writable (mode {mode:04o}) and not owned by root; run `chmod g-w {path}` or `chown root:root {path}`"
    )]
    GroupWritable { path: String, mode: u32 },
    #[error(
        "socket path component {path} is owned by uid {owner}, neither root nor this datanode's uid {me}; run `chown {me} {path}`"
    )]
    Owner { path: String, owner: u32, me: u32 },
    #[error("cannot check socket path component {path}: {error}")]
    Stat { path: String, error: String },
    #[error("socket path {0} must be absolute")]
    Relative(String),
}

/// Checks `dir` and every parent.
pub fn check(dir: &Path) -> Result<(), PathSecurityError> {
    check_as(dir, nix::unistd::geteuid().as_raw())
}

/// Checks `dir` for a process running as `uid`.
pub fn check_as(dir: &Path, uid: u32) -> Result<(), PathSecurityError> {
    if !dir.is_absolute() {
        return Err(PathSecurityError::Relative(dir.display().to_string()));
    }
    let mut p = PathBuf::new();
    for comp in dir.components() {
        p.push(comp);
        let path = p.display().to_string();
        let md = std::fs::metadata(&p).map_err(|e| PathSecurityError::Stat {
            path: path.clone(),
            error: e.to_string(),
        })?;
        let mode = md.mode() & 0o7777;
        if md.uid() != 0 && md.uid() != uid {
            return Err(PathSecurityError::Owner {
                path,
                owner: md.uid(),
                me: uid,
            });
        }
        if mode & 0o002 != 0 {
            return Err(PathSecurityError::WorldWritable { path, mode });
        }
        if mode & 0o020 != 0 && !(md.uid() == 0 && md.gid() == 0) {
            return Err(PathSecurityError::GroupWritable { path, mode });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_writable_tmp_is_refused() {
        let e = check_as(Path::new("/tmp"), 0).unwrap_err();
        assert!(
            matches!(e, PathSecurityError::WorldWritable { ref path, .. } if path == "/tmp"),
            "{e}"
        );
        assert!(e.to_string().contains("chmod o-w /tmp"));
        assert!(matches!(
            check(Path::new("rel")),
            Err(PathSecurityError::Relative(_))
        ));
    }
}
