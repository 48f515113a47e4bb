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
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn world_writable_tmp_is_refused() {
        let e = check_as(Path::new("/tmp"), 0).unwrap_err();
        assert!(matches!(e, PathSecurityError::WorldWritable { ref path, .. } if path == "/tmp"), "{e}");
        assert!(e.to_string().contains("chmod o-w /tmp"));
        assert!(matches!(check(Path::new("rel")), Err(PathSecurityError::Relative(_))));
    }

    #[test]
    fn modes_of_the_last_component() {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        if check(&base).is_err() {
            // The build directory itself sits under an unsafe path; nothing to learn here.
            return;
        }
        let d = tempfile::tempdir_in(&base).unwrap();
        let dir = d.path().join("sockets");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        check(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(check(&dir), Err(PathSecurityError::WorldWritable { .. })));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let e = check(&dir);
        // Root-owned with root group may be group-writable; anything else may not.
        let md = std::fs::metadata(&dir).unwrap();
        if md.uid() == 0 && md.gid() == 0 {
            assert!(e.is_ok());
        } else {
            assert!(matches!(e, Err(PathSecurityError::GroupWritable { .. })));
        }
        // Someone else's directory (needs root to chown).
        if me == 0 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(4242)), None).unwrap();
            assert!(matches!(check(&dir), Err(PathSecurityError::Owner { owner: 4242, .. })));
            check_as(&dir, 4242).unwrap();
        }
    }
}
