//! The on-disk layout of block files:
//! `<data dir>/containers/<container id>/chunks/<local id>.block`, the data
//! directory picked by container id.

use std::path::{Path, PathBuf};

use ozone_proto::BlockId;

use super::error::{StorageError, io_err};

/// The data directories of one datanode.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    data_dirs: Vec<PathBuf>,
}

impl Layout {
    /// The layout over `data_dirs`, creating their `containers` directories
    /// (0700: block files are the datanode's alone; readers get their
    /// descriptors through the short-circuit socket, never their paths).
    pub(crate) fn create(data_dirs: Vec<PathBuf>) -> Result<Self, StorageError> {
        use std::os::unix::fs::PermissionsExt;
        if data_dirs.is_empty() {
            return Err(StorageError::Invalid("no data directory configured".into()));
        }
        for d in &data_dirs {
            let c = d.join("containers");
            private_dirs(&c)?;
            // One made by an older version is closed too.
            std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o700))
                .map_err(io_err(&c))?;
        }
        Ok(Self { data_dirs })
    }

    /// Path of a block's file.
    pub(crate) fn block_path(&self, id: &BlockId) -> PathBuf {
        let dir = &self.data_dirs[(id.container_id % self.data_dirs.len() as u64) as usize];
        dir.join("containers")
            .join(id.container_id.to_string())
            .join("chunks")
            .join(format!("{}.block", id.local_id))
    }

    /// Capacity of the first data directory's file system.
    pub(crate) fn capacity_bytes(&self) -> u64 {
        nix::sys::statvfs::statvfs(self.first())
            .map(|s| s.blocks() * s.fragment_size())
            .unwrap_or(0)
    }

    fn first(&self) -> &Path {
        &self.data_dirs[0]
    }
}

/// Creates `dir` and its missing parents, each new one 0700.
pub(crate) fn private_dirs(dir: &Path) -> Result<(), StorageError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_spread_over_data_dirs_by_container() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        let l = Layout::create(vec![a.clone(), b.clone()]).unwrap();
        assert!(a.join("containers").is_dir() && b.join("containers").is_dir());
        let id = |c| BlockId {
            container_id: c,
            local_id: 7,
            commit_seq: 0,
        };
        assert_eq!(l.block_path(&id(4)), a.join("containers/4/chunks/7.block"));
        assert_eq!(l.block_path(&id(5)), b.join("containers/5/chunks/7.block"));
        assert!(Layout::create(vec![]).is_err());
    }
}
