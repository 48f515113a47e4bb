//! The socket directory check on real directories and modes.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use ozone_datanode::socket_path::{PathSecurityError, check, check_as};

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
    assert!(matches!(
        check(&dir),
        Err(PathSecurityError::WorldWritable { .. })
    ));
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
        assert!(matches!(
            check(&dir),
            Err(PathSecurityError::Owner { owner: 4242, .. })
        ));
        check_as(&dir, 4242).unwrap();
    }
}
