//! The namespace of file-system buckets (FILE_SYSTEM_OPTIMIZED), after
//! Apache Ozone's FSO layout: a directory is a row of its own under
//! (parent object id, name); a file is a row under (parent id, name); a
//! file being written holds its name in the open-file table from create to
//! commit. Renaming a directory rewrites one row (its children are keyed by
//! its object id, which does not change), so it is atomic and O(1) in the
//! directory's size. A recursive delete removes the directory's row and
//! queues its object id; the subtree is purged in the background in
//! batches, each one transaction, blocks included.
//!
//! Every operation is one redb write transaction, durable when it returns.

use std::collections::VecDeque;
use std::ops::Bound;

use ozone_common::names::{KeyPath, fs_components};
use ozone_proto::*;
use prost::Message;
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::quota::Usage;
use super::tables::*;
use super::{OmError, OmStore, bucket_key, decode};
use crate::block_recovery::RecoveredBlock;

/// Entries purged per transaction by the background purge.
pub(crate) const PURGE_BATCH: usize = 1000;

/// What a name in a directory holds.
enum Entry {
    Dir(DirInfo),
    File(KeyInfo),
    Open(u64),
    Missing,
}

/// What a path names, resolved.
enum Found {
    Root,
    Dir(DirInfo),
    File(KeyInfo),
    /// A file being written: its write session.
    Open(KeyInfo),
}

/// The tables of one write transaction.
struct Tables<'t> {
    dirs: redb::Table<'t, (u64, &'static str), &'static [u8]>,
    parents: redb::Table<'t, u64, u64>,
    files: redb::Table<'t, (u64, &'static str), &'static [u8]>,
    open: redb::Table<'t, (u64, &'static str), u64>,
    deleted: redb::Table<'t, u64, u8>,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t redb::WriteTransaction) -> Result<Self, OmError> {
        Ok(Self {
            dirs: txn.open_table(FS_DIRS)?,
            parents: txn.open_table(FS_PARENTS)?,
            files: txn.open_table(FS_FILES)?,
            open: txn.open_table(FS_OPEN)?,
            deleted: txn.open_table(FS_DELETED)?,
        })
    }

    fn entry(&self, parent: u64, name: &str) -> Result<Entry, OmError> {
        entry_in(&self.dirs, &self.files, &self.open, parent, name)
    }

    fn has_children(&self, id: u64) -> Result<bool, OmError> {
        let r = children(id);
        Ok(self.dirs.range(r)?.next().is_some()
            || self.files.range(r)?.next().is_some()
            || self.open.range(r)?.next().is_some())
    }

    /// Whether directory `id` is `ancestor` or lies under it.
    fn is_within(&self, mut id: u64, ancestor: u64, root: u64) -> Result<bool, OmError> {
        loop {
            if id == ancestor {
                return Ok(true);
            }
            if id == root {
                return Ok(false);
            }
            match self.parents.get(id)? {
                Some(p) => id = p.value(),
                None => return Ok(false),
            }
        }
    }

    /// Whether directory `id` is still reachable from the root (not under a
    /// deleted directory).
    fn alive(&self, mut id: u64, root: u64) -> Result<bool, OmError> {
        while id != root {
            match self.parents.get(id)? {
                Some(p) => id = p.value(),
                None => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// A range of (parent id, name) keys.
type ChildRange<'a> = (Bound<(u64, &'a str)>, Bound<(u64, &'static str)>);

/// The key range of `parent`'s children.
fn children(parent: u64) -> ChildRange<'static> {
    (
        Bound::Included((parent, "")),
        Bound::Excluded((parent + 1, "")),
    )
}

/// `parent`'s children after `start_after`.
fn children_after(parent: u64, start_after: &str) -> ChildRange<'_> {
    let lo = if start_after.is_empty() {
        Bound::Included((parent, ""))
    } else {
        Bound::Excluded((parent, start_after))
    };
    (lo, Bound::Excluded((parent + 1, "")))
}

fn entry_in(
    dirs: &impl ReadableTable<(u64, &'static str), &'static [u8]>,
    files: &impl ReadableTable<(u64, &'static str), &'static [u8]>,
    open: &impl ReadableTable<(u64, &'static str), u64>,
    parent: u64,
    name: &str,
) -> Result<Entry, OmError> {
    if let Some(v) = dirs.get((parent, name))? {
        return Ok(Entry::Dir(decode(v.value())?));
    }
    if let Some(v) = files.get((parent, name))? {
        return Ok(Entry::File(decode(v.value())?));
    }
    if let Some(v) = open.get((parent, name))? {
        return Ok(Entry::Open(v.value()));
    }
    Ok(Entry::Missing)
}

/// The directory `comps` names, from `root`: every component must be a
/// directory.
fn walk_dirs(
    dirs: &impl ReadableTable<(u64, &'static str), &'static [u8]>,
    files: &impl ReadableTable<(u64, &'static str), &'static [u8]>,
    open: &impl ReadableTable<(u64, &'static str), u64>,
    root: u64,
    comps: &[&str],
    whole: &str,
) -> Result<u64, OmError> {
    let mut id = root;
    for (i, c) in comps.iter().enumerate() {
        match entry_in(dirs, files, open, id, c)? {
            Entry::Dir(d) => id = d.object_id,
            Entry::File(_) | Entry::Open(_) => {
                return Err(OmError::Precondition(format!(
                    "{} is a file, not a directory (in {whole})",
                    comps[..=i].join("/")
                )));
            }
            Entry::Missing => {
                return Err(OmError::NotFound(format!(
                    "directory {} (in {whole})",
                    comps[..=i].join("/")
                )));
            }
        }
    }
    Ok(id)
}

fn dir_status(path: String, d: &DirInfo) -> FileStatus {
    FileStatus {
        path,
        is_dir: true,
        modified_ms: d.modified_ms,
        created_ms: d.created_ms,
        object_id: d.object_id,
        ..Default::default()
    }
}

fn file_status(path: String, k: &KeyInfo, open: bool) -> FileStatus {
    FileStatus {
        path,
        is_dir: false,
        size: k.size,
        modified_ms: k.modified_ms,
        created_ms: k.created_ms,
        object_id: k.object_id,
        open,
        replication: k.replication,
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The parent components and the last one of a non-empty path.
fn split_last<'a>(comps: &'a [&'a str], path: &str) -> Result<(&'a [&'a str], &'a str), OmError> {
    match comps.split_last() {
        Some((last, parent)) => Ok((parent, last)),
        None => Err(OmError::Invalid(format!(
            "{path:?} names the bucket itself, not a file or directory"
        ))),
    }
}

impl OmStore {
    /// The root directory id of a file-system bucket; `None` for an
    /// object-store bucket.
    pub(crate) fn fs_root(&self, volume: &str, bucket: &str) -> Result<Option<u64>, OmError> {
        let txn = self.db.begin_read()?;
        Self::check_bucket(&txn, volume, bucket)?;
        Self::root_in(&txn.open_table(BUCKETS)?, volume, bucket)
    }

    fn root_in(
        buckets: &impl ReadableTable<&'static str, &'static [u8]>,
        volume: &str,
        bucket: &str,
    ) -> Result<Option<u64>, OmError> {
        let k = bucket_key(volume, bucket);
        let Some(v) = buckets.get(k.as_str())? else {
            return Err(OmError::NotFound(format!("bucket /{k}")));
        };
        let b: BucketInfo = decode(v.value())?;
        Ok((b.layout() == BucketLayout::FileSystemOptimized).then_some(b.object_id))
    }

    /// The root of a file-system bucket, or an error saying the bucket is
    /// an object store.
    fn require_fs(&self, volume: &str, bucket: &str) -> Result<u64, OmError> {
        self.fs_root(volume, bucket)?.ok_or_else(|| {
            OmError::Precondition(format!(
                "bucket /{volume}/{bucket} is an OBJECT_STORE bucket; directories need a \
                 FILE_SYSTEM_OPTIMIZED bucket (ozone sh bucket create --layout FILE_SYSTEM_OPTIMIZED)"
            ))
        })
    }

    /// Makes directory `path` and its missing parents; whether it was
    /// created (false: it existed).
    pub(crate) fn fs_mkdirs(&self, path: KeyPath<'_>, now: u64) -> Result<bool, OmError> {
        let (volume, bucket, path) = path.parts();
        let root = self.require_fs(volume, bucket)?;
        let comps = fs_components(path).map_err(|e| OmError::Invalid(e.to_string()))?;
        let txn = self.write()?;
        let created = {
            let mut t = Tables::open(&txn)?;
            let (_, made) = Self::make_dirs(&txn, &mut t, root, &comps, path, now)?;
            drop(t);
            Self::charge(&txn, volume, bucket, Usage::names(made as i64))?;
            made > 0
        };
        self.commit(txn)?;
        Ok(created)
    }

    /// Walks `comps` from `root`, making missing directories; returns the
    /// last one's id and how many were made.
    fn make_dirs(
        txn: &redb::WriteTransaction,
        t: &mut Tables,
        root: u64,
        comps: &[&str],
        whole: &str,
        now: u64,
    ) -> Result<(u64, u64), OmError> {
        let mut id = root;
        let mut created = 0;
        for (i, c) in comps.iter().enumerate() {
            match t.entry(id, c)? {
                Entry::Dir(d) => id = d.object_id,
                Entry::File(_) | Entry::Open(_) => {
                    return Err(OmError::AlreadyExists(format!(
                        "file {} (in {whole}), not a directory",
                        comps[..=i].join("/")
                    )));
                }
                Entry::Missing => {
                    let new = Self::next(txn, "object")?;
                    let d = DirInfo {
                        object_id: new,
                        parent_id: id,
                        name: c.to_string(),
                        created_ms: now,
                        modified_ms: now,
                    };
                    t.dirs.insert((id, *c), d.encode_to_vec().as_slice())?;
                    t.parents.insert(new, id)?;
                    id = new;
                    created += 1;
                }
            }
        }
        Ok((id, created))
    }

    /// Starts writing file `template.name` of a file-system bucket: makes
    /// missing parent directories and reserves the name until commit.
    /// `exclusive` fails if the file exists; a file being written is never
    /// taken over. Returns the write session.
    pub(crate) fn fs_create(
        &self,
        root: u64,
        template: &KeyInfo,
        exclusive: bool,
        now: u64,
    ) -> Result<u64, OmError> {
        let path = template.name.clone();
        let comps = fs_components(&path).map_err(|e| OmError::Invalid(e.to_string()))?;
        let (parent_comps, leaf) = split_last(&comps, &path)?;
        let txn = self.write()?;
        let id = {
            let mut t = Tables::open(&txn)?;
            let (parent, made) = Self::make_dirs(&txn, &mut t, root, parent_comps, &path, now)?;
            Self::charge(
                &txn,
                &template.volume,
                &template.bucket,
                Usage::names(made as i64),
            )?;
            match t.entry(parent, leaf)? {
                Entry::Dir(_) => {
                    return Err(OmError::AlreadyExists(format!("{path} is a directory")));
                }
                Entry::Open(_) => {
                    return Err(OmError::AlreadyExists(format!(
                        "{path} is being written by another writer"
                    )));
                }
                Entry::File(_) if exclusive => {
                    return Err(OmError::AlreadyExists(format!("file {path}")));
                }
                Entry::File(_) | Entry::Missing => {}
            }
            let id = Self::next(&txn, "session")?;
            let session = KeyInfo {
                parent_id: parent,
                object_id: Self::next(&txn, "object")?,
                ..template.clone()
            };
            txn.open_table(OPEN_KEYS)?
                .insert(id, session.encode_to_vec().as_slice())?;
            t.open.insert((parent, leaf), id)?;
            id
        };
        self.commit(txn)?;
        Ok(id)
    }

    /// Commits file session `session` (in `txn`): the file replaces the
    /// name's reservation; a file it overwrites has its blocks queued.
    /// Returns the committed file, or `None` when the parent directory was
    /// deleted meanwhile (the caller drops the session).
    pub(crate) fn fs_commit(
        txn: &redb::WriteTransaction,
        id: u64,
        key: &KeyInfo,
        now: u64,
    ) -> Result<Option<KeyInfo>, OmError> {
        let root = {
            let buckets = txn.open_table(BUCKETS)?;
            Self::root_in(&buckets, &key.volume, &key.bucket)?.unwrap_or(0)
        };
        let mut t = Tables::open(txn)?;
        let leaf = key.name.rsplit('/').next().unwrap_or_default().to_string();
        let reserved = t
            .open
            .get((key.parent_id, leaf.as_str()))?
            .map(|v| v.value());
        if reserved == Some(id) {
            t.open.remove((key.parent_id, leaf.as_str()))?;
        }
        if !t.alive(key.parent_id, root)? {
            return Ok(None);
        }
        let mut stored = KeyInfo {
            name: leaf.clone(),
            modified_ms: now,
            ..key.clone()
        };
        let old: Option<KeyInfo> = t
            .files
            .get((key.parent_id, leaf.as_str()))?
            .map(|v| decode(v.value()))
            .transpose()?;
        let freed = old.as_ref().map(Usage::key).unwrap_or_default();
        Self::charge(
            txn,
            &key.volume,
            &key.bucket,
            Usage::key(key).plus(freed.neg()),
        )?;
        if let Some(old) = old {
            stored.created_ms = old.created_ms;
            Self::queue_deletes(txn, &old.blocks)?;
        }
        t.files.insert(
            (key.parent_id, leaf.as_str()),
            stored.encode_to_vec().as_slice(),
        )?;
        Ok(Some(KeyInfo {
            name: key.name.clone(),
            ..stored
        }))
    }

    /// Drops the name reservation of an abandoned file session (in `txn`).
    /// Whether write session `id` (of file `key`) is what writes its path
    /// now: false for an orphan whose directory was deleted (and maybe made
    /// again, with another writer of the same name in it).
    pub(crate) fn fs_holds(&self, id: u64, key: &KeyInfo) -> Result<bool, OmError> {
        let Some(root) = self.fs_root(&key.volume, &key.bucket)? else {
            return Ok(false);
        };
        let comps = fs_components(&key.name).map_err(|e| OmError::Invalid(e.to_string()))?;
        let (parent_comps, leaf) = split_last(&comps, &key.name)?;
        let txn = self.db.begin_read()?;
        let dirs = txn.open_table(FS_DIRS)?;
        let files = txn.open_table(FS_FILES)?;
        let open = txn.open_table(FS_OPEN)?;
        let parent = match walk_dirs(&dirs, &files, &open, root, parent_comps, &key.name) {
            Ok(p) => p,
            Err(OmError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        Ok(parent == key.parent_id && open.get((parent, leaf))?.map(|v| v.value()) == Some(id))
    }

    pub(crate) fn fs_release(
        txn: &redb::WriteTransaction,
        id: u64,
        key: &KeyInfo,
    ) -> Result<(), OmError> {
        if key.parent_id == 0 {
            return Ok(());
        }
        let mut open = txn.open_table(FS_OPEN)?;
        let leaf = key.name.rsplit('/').next().unwrap_or_default();
        let held = open.get((key.parent_id, leaf))?.map(|v| v.value());
        if held == Some(id) {
            open.remove((key.parent_id, leaf))?;
        }
        Ok(())
    }

    /// What `path` names in the bucket with root `root` (one read
    /// transaction); a missing path or parent is `NotFound` naming it.
    fn found(&self, root: u64, volume: &str, bucket: &str, path: &str) -> Result<Found, OmError> {
        let comps = fs_components(path).map_err(|e| OmError::Invalid(e.to_string()))?;
        let Some((leaf, parent_comps)) = comps.split_last() else {
            return Ok(Found::Root);
        };
        let txn = self.db.begin_read()?;
        let dirs = txn.open_table(FS_DIRS)?;
        let files = txn.open_table(FS_FILES)?;
        let open = txn.open_table(FS_OPEN)?;
        let not_found = || OmError::NotFound(format!("/{volume}/{bucket}/{}", comps.join("/")));
        let parent = match walk_dirs(&dirs, &files, &open, root, parent_comps, path) {
            Ok(p) => p,
            Err(OmError::NotFound(_)) => return Err(not_found()),
            Err(e) => return Err(e),
        };
        Ok(match entry_in(&dirs, &files, &open, parent, leaf)? {
            Entry::Dir(d) => Found::Dir(d),
            Entry::File(k) => Found::File(k),
            Entry::Open(session) => {
                let t = txn.open_table(OPEN_KEYS)?;
                match t.get(session)? {
                    Some(v) => Found::Open(decode(v.value())?),
                    None => return Err(not_found()),
                }
            }
            Entry::Missing => return Err(not_found()),
        })
    }

    /// The file at `path` of a file-system bucket (a file being written:
    /// what its last hsync made visible).
    pub(crate) fn fs_lookup(
        &self,
        root: u64,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> Result<KeyInfo, OmError> {
        let named = |k: KeyInfo| KeyInfo {
            name: path.to_string(),
            ..k
        };
        match self.found(root, volume, bucket, path)? {
            Found::File(k) => Ok(named(k)),
            Found::Open(s) => {
                let (blocks, last_block_open) = readable_blocks(&s);
                Ok(named(KeyInfo {
                    blocks,
                    synced_blocks: Vec::new(),
                    last_block_open,
                    ..s
                }))
            }
            Found::Root | Found::Dir(_) => Err(OmError::Precondition(format!(
                "/{volume}/{bucket}/{path} is a directory"
            ))),
        }
    }

    /// The status of `path` ("" is the bucket's root).
    pub(crate) fn fs_status(&self, path: KeyPath<'_>) -> Result<FileStatus, OmError> {
        let (volume, bucket, path) = path.parts();
        let root = self.require_fs(volume, bucket)?;
        let shown = fs_components(path)
            .map_err(|e| OmError::Invalid(e.to_string()))?
            .join("/");
        Ok(match self.found(root, volume, bucket, path)? {
            Found::Root => FileStatus {
                path: String::new(),
                is_dir: true,
                object_id: root,
                ..Default::default()
            },
            Found::Dir(d) => dir_status(shown, &d),
            Found::File(k) => file_status(shown, &k, false),
            Found::Open(s) => file_status(shown, &s, true),
        })
    }

    /// The entries of directory `path` (or the file itself) whose names
    /// sort after `start_after`, at most `limit`, by name.
    pub(crate) fn fs_list(
        &self,
        path: KeyPath<'_>,
        start_after: &str,
        limit: usize,
    ) -> Result<Vec<FileStatus>, OmError> {
        let (volume, bucket, path) = path.parts();
        let status = self.fs_status(KeyPath::new(volume, bucket, path))?;
        if !status.is_dir {
            return Ok(if start_after.is_empty() {
                vec![status]
            } else {
                Vec::new()
            });
        }
        let txn = self.db.begin_read()?;
        let dirs = txn.open_table(FS_DIRS)?;
        let files = txn.open_table(FS_FILES)?;
        let open = txn.open_table(FS_OPEN)?;
        let sessions = txn.open_table(OPEN_KEYS)?;
        let id = status.object_id;
        let base = status.path;
        let mut out: Vec<(String, FileStatus)> = Vec::with_capacity(limit.min(1024));
        for row in dirs.range(children_after(id, start_after))?.take(limit) {
            let (k, v) = row?;
            let d: DirInfo = decode(v.value())?;
            let name = k.value().1.to_string();
            out.push((name.clone(), dir_status(join(&base, &name), &d)));
        }
        for row in files.range(children_after(id, start_after))?.take(limit) {
            let (k, v) = row?;
            let f: KeyInfo = decode(v.value())?;
            let name = k.value().1.to_string();
            out.push((name.clone(), file_status(join(&base, &name), &f, false)));
        }
        for row in open.range(children_after(id, start_after))?.take(limit) {
            let (k, v) = row?;
            let name = k.value().1.to_string();
            if files.get((id, name.as_str()))?.is_some() {
                continue; // the committed version is listed
            }
            if let Some(s) = sessions.get(v.value())? {
                let s: KeyInfo = decode(s.value())?;
                out.push((name.clone(), file_status(join(&base, &name), &s, true)));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.truncate(limit);
        Ok(out.into_iter().map(|(_, s)| s).collect())
    }

    /// The committed files of a file-system bucket as keys (full paths as
    /// names) that start with `prefix` and sort after `start_after`, at
    /// most `limit`, by name: `ozone sh key ls` on such a bucket. Only
    /// directories that can hold a match are walked.
    pub(crate) fn fs_list_keys(
        &self,
        root: u64,
        prefix: &str,
        start_after: &str,
        limit: usize,
    ) -> Result<Vec<KeyInfo>, OmError> {
        let txn = self.db.begin_read()?;
        let dirs = txn.open_table(FS_DIRS)?;
        let files = txn.open_table(FS_FILES)?;
        let mut out: Vec<KeyInfo> = Vec::new();
        let mut queue = VecDeque::from([(root, String::new())]);
        while let Some((id, base)) = queue.pop_front() {
            for row in dirs.range(children(id))? {
                let (k, v) = row?;
                let path = join(&base, k.value().1);
                let under = format!("{path}/");
                if under.starts_with(prefix) || prefix.starts_with(&under) {
                    queue.push_back((decode::<DirInfo>(v.value())?.object_id, path));
                }
            }
            for row in files.range(children(id))? {
                let (k, v) = row?;
                let path = join(&base, k.value().1);
                if path.starts_with(prefix) && path.as_str() > start_after {
                    let mut f: KeyInfo = decode(v.value())?;
                    f.name = path;
                    out.push(f);
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.truncate(limit);
        Ok(out)
    }

    /// Renames `from` to `to` atomically (Hadoop's rules: the destination's
    /// parent must be a directory; an existing directory receives the
    /// source under its own name; an existing file is not replaced; a
    /// directory cannot move into itself). Returns the new path.
    pub(crate) fn fs_rename(
        &self,
        from: KeyPath<'_>,
        to: &str,
        now: u64,
    ) -> Result<String, OmError> {
        let (volume, bucket, from) = from.parts();
        let root = self.require_fs(volume, bucket)?;
        let fc = fs_components(from).map_err(|e| OmError::Invalid(e.to_string()))?;
        let tc = fs_components(to).map_err(|e| OmError::Invalid(e.to_string()))?;
        let (src_parent_comps, src_name) = split_last(&fc, from)?;
        let txn = self.write()?;
        let new_path = {
            let mut t = Tables::open(&txn)?;
            let sp = walk_dirs(&t.dirs, &t.files, &t.open, root, src_parent_comps, from)?;
            let src = t.entry(sp, src_name)?;
            match &src {
                Entry::Missing => {
                    return Err(OmError::NotFound(format!(
                        "rename source /{volume}/{bucket}/{}",
                        fc.join("/")
                    )));
                }
                Entry::Open(_) => {
                    return Err(OmError::Precondition(format!(
                        "{} is being written: close it (or recover its lease) before renaming",
                        fc.join("/")
                    )));
                }
                Entry::Dir(_) | Entry::File(_) => {}
            }
            // Where it goes: into an existing directory under its own name,
            // or to the destination path itself.
            let (tp, tname, tpath) = match tc.split_last() {
                None => (root, src_name.to_string(), src_name.to_string()),
                Some((last, parent_comps)) => {
                    let dp = walk_dirs(&t.dirs, &t.files, &t.open, root, parent_comps, to)
                        .map_err(|e| match e {
                            OmError::NotFound(m) => {
                                OmError::NotFound(format!("rename destination's parent: {m}"))
                            }
                            e => e,
                        })?;
                    match t.entry(dp, last)? {
                        Entry::Dir(d) => (
                            d.object_id,
                            src_name.to_string(),
                            format!("{}/{src_name}", tc.join("/")),
                        ),
                        Entry::File(_) | Entry::Open(_) => {
                            if sp == dp && *last == src_name {
                                return Ok(fc.join("/")); // a file onto itself
                            }
                            return Err(OmError::AlreadyExists(format!(
                                "rename destination /{volume}/{bucket}/{}",
                                tc.join("/")
                            )));
                        }
                        Entry::Missing => (dp, last.to_string(), tc.join("/")),
                    }
                }
            };
            if tp == sp && tname == src_name {
                return Ok(fc.join("/"));
            }
            if let Entry::Dir(d) = &src
                && t.is_within(tp, d.object_id, root)?
            {
                return Err(OmError::Invalid(format!(
                    "cannot move directory {} into itself ({tpath})",
                    fc.join("/")
                )));
            }
            if !matches!(t.entry(tp, &tname)?, Entry::Missing) {
                return Err(OmError::AlreadyExists(format!(
                    "rename destination /{volume}/{bucket}/{tpath}"
                )));
            }
            match src {
                Entry::Dir(mut d) => {
                    t.dirs.remove((sp, src_name))?;
                    d.parent_id = tp;
                    d.name = tname.clone();
                    d.modified_ms = now;
                    t.dirs
                        .insert((tp, tname.as_str()), d.encode_to_vec().as_slice())?;
                    t.parents.insert(d.object_id, tp)?;
                }
                Entry::File(mut k) => {
                    t.files.remove((sp, src_name))?;
                    k.parent_id = tp;
                    k.name = tname.clone();
                    k.modified_ms = now;
                    t.files
                        .insert((tp, tname.as_str()), k.encode_to_vec().as_slice())?;
                }
                Entry::Open(_) | Entry::Missing => unreachable!("checked above"),
            }
            tpath
        };
        self.commit(txn)?;
        Ok(new_path)
    }

    /// Deletes a file, an empty directory, or (with `recursive`) a
    /// directory and everything under it: the directory disappears at once,
    /// its subtree is purged in the background.
    pub(crate) fn fs_delete(&self, path: KeyPath<'_>, recursive: bool) -> Result<(), OmError> {
        let (volume, bucket, path) = path.parts();
        let root = self.require_fs(volume, bucket)?;
        let comps = fs_components(path).map_err(|e| OmError::Invalid(e.to_string()))?;
        let (parent_comps, leaf) = split_last(&comps, path)?;
        let txn = self.write()?;
        {
            let mut t = Tables::open(&txn)?;
            let parent = walk_dirs(&t.dirs, &t.files, &t.open, root, parent_comps, path)?;
            match t.entry(parent, leaf)? {
                Entry::Missing => {
                    return Err(OmError::NotFound(format!(
                        "/{volume}/{bucket}/{}",
                        comps.join("/")
                    )));
                }
                Entry::File(k) => {
                    t.files.remove((parent, leaf))?;
                    Self::charge(&txn, volume, bucket, Usage::key(&k).neg())?;
                    Self::queue_deletes(&txn, &k.blocks)?;
                }
                Entry::Open(session) => {
                    t.open.remove((parent, leaf))?;
                    Self::drop_session(&txn, session)?;
                }
                Entry::Dir(d) => {
                    let busy = t.has_children(d.object_id)?;
                    if busy && !recursive {
                        return Err(OmError::Precondition(format!(
                            "directory /{volume}/{bucket}/{} is not empty (delete it recursively)",
                            comps.join("/")
                        )));
                    }
                    t.dirs.remove((parent, leaf))?;
                    t.parents.remove(d.object_id)?;
                    Self::charge(&txn, volume, bucket, Usage::names(-1))?;
                    if busy {
                        t.deleted.insert(d.object_id, 0u8)?;
                        txn.open_table(FS_DELETED_BUCKET)?
                            .insert(d.object_id, bucket_key(volume, bucket).as_str())?;
                    }
                }
            }
        }
        self.commit(txn)?;
        Ok(())
    }

    /// Closes the file at `path` if it is being written (its writer is
    /// gone: HBase's WAL recovery) at what a reader would see: its last
    /// synced length and finished blocks, and the block being written at
    /// the length block recovery found (`recovered`, when it is that block)
    /// or else the OM's. Other blocks of the session are queued for
    /// deletion; the writer's later calls fail. Returns the length and
    /// whether the file was closed now; a file already closed is left as it
    /// is.
    pub(crate) fn fs_recover_lease(
        &self,
        path: KeyPath<'_>,
        now: u64,
        recovered: Option<&RecoveredBlock>,
    ) -> Result<(u64, bool), OmError> {
        let (volume, bucket, path) = path.parts();
        let root = self.require_fs(volume, bucket)?;
        let comps = fs_components(path).map_err(|e| OmError::Invalid(e.to_string()))?;
        let (parent_comps, leaf) = split_last(&comps, path)?;
        let txn = self.write()?;
        let length = {
            let mut t = Tables::open(&txn)?;
            let parent = walk_dirs(&t.dirs, &t.files, &t.open, root, parent_comps, path)?;
            match t.entry(parent, leaf)? {
                Entry::File(k) => return Ok((k.size, false)),
                Entry::Dir(_) => {
                    return Err(OmError::Precondition(format!(
                        "/{volume}/{bucket}/{} is a directory",
                        comps.join("/")
                    )));
                }
                Entry::Missing => {
                    return Err(OmError::NotFound(format!(
                        "/{volume}/{bucket}/{}",
                        comps.join("/")
                    )));
                }
                Entry::Open(session) => {
                    let s: KeyInfo = match txn.open_table(OPEN_KEYS)?.remove(session)? {
                        Some(v) => decode(v.value())?,
                        None => return Err(OmError::NotFound(format!("session {session}"))),
                    };
                    t.open.remove((parent, leaf))?;
                    let (mut blocks, open) = readable_blocks(&s);
                    if let (true, Some(r), Some(last)) = (open, recovered, blocks.last_mut())
                        && last.block == Some(r.id)
                        && r.length > last.length
                    {
                        last.length = r.length;
                        last.replicas = r.replicas.iter().map(|d| super::id_only(d)).collect();
                    }
                    if blocks.last().is_some_and(|b| b.length == 0) {
                        blocks.pop();
                    }
                    let unused: Vec<KeyBlock> = s
                        .blocks
                        .iter()
                        .filter(|a| !blocks.iter().any(|k| k.block == a.block))
                        .cloned()
                        .collect();
                    Self::queue_deletes(&txn, &unused)?;
                    let reservation = Usage::reservation(&s);
                    let file = KeyInfo {
                        name: leaf.to_string(),
                        size: blocks.iter().map(|b| b.length).sum(),
                        blocks,
                        synced_blocks: Vec::new(),
                        last_block_open: false,
                        created_ms: now,
                        modified_ms: now,
                        parent_id: parent,
                        ..s
                    };
                    let mut used = Usage::key(&file);
                    if let Some(old) = t.files.get((parent, leaf))? {
                        let old: KeyInfo = decode(old.value())?;
                        used = used.plus(Usage::key(&old).neg());
                        Self::queue_deletes(&txn, &old.blocks)?;
                    }
                    t.files
                        .insert((parent, leaf), file.encode_to_vec().as_slice())?;
                    // Synced data is kept whatever the quota says; the
                    // session's reservation is given back.
                    Self::account(&txn, volume, bucket, used.plus(reservation.neg()))?;
                    file.size
                }
            }
        };
        self.commit(txn)?;
        Ok((length, true))
    }

    /// Whether the file at `path` is closed (not being written).
    pub(crate) fn fs_is_closed(&self, path: KeyPath<'_>) -> Result<bool, OmError> {
        let (volume, bucket, path) = path.parts();
        let st = self.fs_status(KeyPath::new(volume, bucket, path))?;
        if st.is_dir {
            return Err(OmError::Precondition(format!(
                "/{volume}/{bucket}/{path} is a directory"
            )));
        }
        Ok(!st.open)
    }

    /// Removes a write session (in `txn`), queueing its blocks.
    fn drop_session(txn: &redb::WriteTransaction, session: u64) -> Result<(), OmError> {
        let removed = txn
            .open_table(OPEN_KEYS)?
            .remove(session)?
            .map(|v| decode::<KeyInfo>(v.value()))
            .transpose()?;
        if let Some(s) = removed {
            Self::queue_deletes(txn, &s.blocks)?;
        }
        Ok(())
    }

    /// Purges up to `batch` entries under deleted directories in one
    /// transaction: files (blocks queued), files being written (sessions
    /// dropped), subdirectories (queued in turn). A directory leaves the
    /// queue when it has no entries left. Returns the entries purged.
    pub(crate) fn fs_purge(&self, batch: usize) -> Result<usize, OmError> {
        if self.fs_purge_pending()? == 0 {
            return Ok(0); // no write transaction for nothing
        }
        let txn = self.write()?;
        let mut purged = 0;
        {
            let mut t = Tables::open(&txn)?;
            let ids: Vec<u64> = t
                .deleted
                .iter()?
                .take(64)
                .map(|r| r.map(|(k, _)| k.value()).map_err(OmError::from))
                .collect::<Result<_, _>>()?;
            let mut owners = txn.open_table(FS_DELETED_BUCKET)?;
            for id in ids {
                if purged >= batch {
                    break;
                }
                // Directories deleted before use was kept have no owner.
                let owner = owners.get(id)?.map(|v| v.value().to_string());
                let mut freed = Usage::default();
                let files: Vec<(String, KeyInfo)> = t
                    .files
                    .range(children(id))?
                    .take(batch - purged)
                    .map(|r| {
                        let (k, v) = r?;
                        Ok((k.value().1.to_string(), decode(v.value())?))
                    })
                    .collect::<Result<_, OmError>>()?;
                for (name, f) in &files {
                    t.files.remove((id, name.as_str()))?;
                    freed = freed.plus(Usage::key(f));
                    Self::queue_deletes(&txn, &f.blocks)?;
                }
                purged += files.len();
                let open: Vec<(String, u64)> = t
                    .open
                    .range(children(id))?
                    .take(batch.saturating_sub(purged))
                    .map(|r| {
                        let (k, v) = r?;
                        Ok((k.value().1.to_string(), v.value()))
                    })
                    .collect::<Result<_, OmError>>()?;
                for (name, session) in &open {
                    t.open.remove((id, name.as_str()))?;
                    Self::drop_session(&txn, *session)?;
                }
                purged += open.len();
                let dirs: Vec<(String, u64)> = t
                    .dirs
                    .range(children(id))?
                    .take(batch.saturating_sub(purged))
                    .map(|r| {
                        let (k, v) = r?;
                        Ok((
                            k.value().1.to_string(),
                            decode::<DirInfo>(v.value())?.object_id,
                        ))
                    })
                    .collect::<Result<_, OmError>>()?;
                for (name, sub) in &dirs {
                    t.dirs.remove((id, name.as_str()))?;
                    t.parents.remove(*sub)?;
                    t.deleted.insert(*sub, 0u8)?;
                    if let Some(o) = &owner {
                        owners.insert(*sub, o.as_str())?;
                    }
                }
                freed.names += dirs.len() as i64;
                purged += dirs.len();
                if !t.has_children(id)? {
                    t.deleted.remove(id)?;
                    owners.remove(id)?;
                    purged += 1;
                }
                if let Some((v, b)) = owner.as_deref().and_then(|o| o.split_once('/')) {
                    Self::charge(&txn, v, b, freed.neg())?;
                }
            }
        }
        self.commit(txn)?;
        Ok(purged)
    }

    /// Directories still being purged.
    pub(crate) fn fs_purge_pending(&self) -> Result<u64, OmError> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(FS_DELETED)?.len()?)
    }

    /// Bytes, files and directories under `path` (a directory counts
    /// itself, as in Hadoop).
    pub(crate) fn fs_summary(&self, path: KeyPath<'_>) -> Result<ContentSummary, OmError> {
        let (volume, bucket, path) = path.parts();
        let status = self.fs_status(KeyPath::new(volume, bucket, path))?;
        if !status.is_dir {
            return Ok(ContentSummary {
                length: status.size,
                file_count: 1,
                directory_count: 0,
            });
        }
        let txn = self.db.begin_read()?;
        let dirs = txn.open_table(FS_DIRS)?;
        let files = txn.open_table(FS_FILES)?;
        let mut sum = ContentSummary::default();
        let mut queue = VecDeque::from([status.object_id]);
        while let Some(id) = queue.pop_front() {
            sum.directory_count += 1;
            for row in files.range(children(id))? {
                let (_, v) = row?;
                let f: KeyInfo = decode(v.value())?;
                sum.length += f.size;
                sum.file_count += 1;
            }
            for row in dirs.range(children(id))? {
                let (_, v) = row?;
                queue.push_back(decode::<DirInfo>(v.value())?.object_id);
            }
        }
        Ok(sum)
    }
}

/// What a reader of a file being written is shown: the blocks the OM knows
/// the lengths of (the last hsync, or the blocks the writer has finished),
/// and whether the last of them is still being written (its replicas tell
/// how much an hflush has made visible). The block being written is the
/// session's latest allocation; one allocated to replace a synced block
/// that is still being written is left out until an hsync names it, and the
/// replaced block's remaining replicas answer for it meanwhile.
fn readable_blocks(s: &KeyInfo) -> (Vec<KeyBlock>, bool) {
    let mut blocks = s.synced_blocks.clone();
    let Some(latest) = s.blocks.last() else {
        return (blocks, false);
    };
    let open_synced = s.last_block_open && !blocks.is_empty();
    if open_synced || blocks.last().is_some_and(|b| b.block == latest.block) {
        return (blocks, open_synced);
    }
    blocks.push(KeyBlock {
        offset: s.size,
        length: 0,
        receipts: Vec::new(),
        token: Vec::new(),
        ..latest.clone()
    });
    (blocks, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block size allocations reserve in these tests.
    const BS: u64 = 256 << 20;

    fn store(dir: &std::path::Path) -> OmStore {
        OmStore::open(&dir.join("om.redb")).unwrap()
    }

    fn new_bucket(dir: &std::path::Path) -> OmStore {
        let s = store(dir);
        s.create_volume("vol", 1).unwrap();
        s.create_bucket("vol", "fsb", BucketLayout::FileSystemOptimized, 1)
            .unwrap();
        s
    }

    fn file(path: &str) -> KeyInfo {
        KeyInfo {
            volume: "vol".into(),
            bucket: "fsb".into(),
            name: path.into(),
            ..Default::default()
        }
    }

    /// Writes and commits a one-block file on `dn1`.
    fn write(s: &OmStore, path: &str, size: u64) -> KeyInfo {
        let sid = s.open_key(&file(path), true, 2).unwrap();
        let mut b = s
            .allocate_block(sid, &["dn1".into()], BS, &[], None)
            .unwrap();
        b.length = size;
        s.commit_key(sid, &[b], size, None, 3).unwrap()
    }

    fn names(s: &OmStore, dir: &str) -> Vec<String> {
        s.fs_list(KeyPath::new("vol", "fsb", dir), "", 100)
            .unwrap()
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    /// Keys of a file-system bucket list as full paths, by prefix and page;
    /// its use follows writes, overwrites, deletes and purges.
    #[test]
    fn keys_list_by_prefix_and_use_follows_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let s = new_bucket(dir.path());
        for p in ["a/x", "a/b/y", "a-c", "z/q/r"] {
            write(&s, p, 10);
        }
        let keys = |prefix: &str, after: &str, n: usize| -> Vec<String> {
            s.list_keys(KeyPath::new("vol", "fsb", prefix), after, n)
                .unwrap()
                .into_iter()
                .map(|k| k.name)
                .collect()
        };
        assert_eq!(keys("", "", 10), ["a-c", "a/b/y", "a/x", "z/q/r"]);
        assert_eq!(keys("a/", "", 10), ["a/b/y", "a/x"]);
        assert_eq!(keys("a", "a-c", 2), ["a/b/y", "a/x"]);
        assert_eq!(keys("z/q/", "", 10), ["z/q/r"]);
        // Names: 4 files and 4 directories (a, a/b, z, z/q); 3 replicas.
        let b = s.get_bucket("vol", "fsb").unwrap();
        assert_eq!((b.used_bytes, b.used_namespace), (120, 8));
        let sid = s.open_key(&file("a/x"), false, 2).unwrap();
        let mut blk = s
            .allocate_block(sid, &["dn1".into()], BS, &[], None)
            .unwrap();
        blk.length = 20;
        s.commit_key(sid, &[blk], 20, None, 3).unwrap();
        assert_eq!(s.get_bucket("vol", "fsb").unwrap().used_bytes, 150);
        s.fs_delete(KeyPath::new("vol", "fsb", "a"), true).unwrap();
        // The directory goes at once, what it held as it is purged.
        assert_eq!(s.get_bucket("vol", "fsb").unwrap().used_namespace, 7);
        while s.fs_purge(1).unwrap() > 0 {}
        let b = s.get_bucket("vol", "fsb").unwrap();
        assert_eq!((b.used_bytes, b.used_namespace), (60, 4));
    }

    #[test]
    fn directories_files_renames_and_deletes() {
        let d = tempfile::tempdir().unwrap();
        let s = new_bucket(d.path());
        assert!(s.fs_mkdirs(KeyPath::new("vol", "fsb", "a/b/c"), 1).unwrap());
        assert!(!s.fs_mkdirs(KeyPath::new("vol", "fsb", "a/b"), 1).unwrap());
        write(&s, "a/b/c/f1", 10);
        write(&s, "a/b/f2", 5);
        assert!(matches!(
            s.open_key(&file("a/b/f2"), true, 4),
            Err(OmError::AlreadyExists(_))
        ));
        assert!(
            s.fs_mkdirs(KeyPath::new("vol", "fsb", "a/b/f2/x"), 1)
                .is_err()
        );
        let st = s.fs_status(KeyPath::new("vol", "fsb", "a/b/c/f1")).unwrap();
        assert!(!st.is_dir && !st.open && st.size == 10);
        assert!(
            s.fs_status(KeyPath::new("vol", "fsb", "a/b"))
                .unwrap()
                .is_dir
        );
        assert_eq!(names(&s, "a/b"), ["a/b/c", "a/b/f2"]);

        // A directory's rename moves its subtree with it.
        assert_eq!(
            s.fs_rename(KeyPath::new("vol", "fsb", "a/b"), "z", 5)
                .unwrap(),
            "z"
        );
        assert_eq!(
            s.fs_status(KeyPath::new("vol", "fsb", "z/c/f1"))
                .unwrap()
                .size,
            10
        );
        assert!(matches!(
            s.fs_status(KeyPath::new("vol", "fsb", "a/b/c/f1")),
            Err(OmError::NotFound(_))
        ));
        assert!(
            s.fs_rename(KeyPath::new("vol", "fsb", "z"), "z/c/inside", 6)
                .is_err()
        );
        assert_eq!(names(&s, "a"), Vec::<String>::new());

        // A non-empty directory needs `recursive`, and stays.
        assert!(s.fs_delete(KeyPath::new("vol", "fsb", "z"), false).is_err());
        let sum = s.fs_summary(KeyPath::new("vol", "fsb", "z")).unwrap();
        assert_eq!((sum.length, sum.file_count), (15, 2));
        s.fs_delete(KeyPath::new("vol", "fsb", "z"), true).unwrap();
        assert!(matches!(
            s.fs_status(KeyPath::new("vol", "fsb", "z/f2")),
            Err(OmError::NotFound(_))
        ));
        // The subtree is purged in batches, its blocks queued for deletion.
        assert_eq!(s.fs_purge_pending().unwrap(), 1);
        let mut batches = 0;
        while s.fs_purge(1).unwrap() > 0 {
            batches += 1;
        }
        assert!(batches >= 2, "{batches}");
        assert_eq!(s.fs_purge_pending().unwrap(), 0);
        assert_eq!(s.pending_deletes("dn1", 10).unwrap().len(), 2);
    }

    #[test]
    fn a_file_being_written_is_held_and_recovered() {
        let d = tempfile::tempdir().unwrap();
        let s = new_bucket(d.path());
        let sid = s.open_key(&file("wal/w1"), true, 2).unwrap();
        let mut b = s
            .allocate_block(sid, &["dn1".into()], BS, &[], None)
            .unwrap();
        assert!(
            !s.fs_is_closed(KeyPath::new("vol", "fsb", "wal/w1"))
                .unwrap()
        );
        assert!(
            s.fs_status(KeyPath::new("vol", "fsb", "wal/w1"))
                .unwrap()
                .open
        );
        // Another writer of the same name is refused while it is open.
        assert!(matches!(
            s.open_key(&file("wal/w1"), true, 3),
            Err(OmError::AlreadyExists(_))
        ));
        b.length = 7;
        s.hsync_key(sid, std::slice::from_ref(&b), 7, None).unwrap();
        // Lease recovery closes it at the synced length; the old writer's
        // commit is refused after that.
        let (len, _) = s
            .fs_recover_lease(KeyPath::new("vol", "fsb", "wal/w1"), 4, None)
            .unwrap();
        assert_eq!(len, 7);
        assert!(
            s.fs_is_closed(KeyPath::new("vol", "fsb", "wal/w1"))
                .unwrap()
        );
        assert!(s.commit_key(sid, &[b], 7, None, 5).is_err());
        assert_eq!(
            s.fs_status(KeyPath::new("vol", "fsb", "wal/w1"))
                .unwrap()
                .size,
            7
        );
    }

    /// A reader of a file being written sees the finished blocks (reported
    /// with the next allocation), the hsynced ones, and the block being
    /// written flagged open; a block allocated to replace an hsynced one
    /// is not shown until an hsync names it.
    #[test]
    fn readers_of_a_file_being_written_see_the_block_being_written() {
        let d = tempfile::tempdir().unwrap();
        let s = new_bucket(d.path());
        let path = KeyPath::new("vol", "fsb", "wal/w2");
        let sid = s.open_key(&file("wal/w2"), true, 2).unwrap();
        let seen = |s: &OmStore| {
            let k = s.lookup_key(path).unwrap();
            let blocks: Vec<(u64, u64, u64)> = k
                .blocks
                .iter()
                .map(|b| (b.block.unwrap().local_id, b.offset, b.length))
                .collect();
            (blocks, k.size, k.last_block_open)
        };
        assert_eq!(seen(&s), (vec![], 0, false));
        let mut b1 = s
            .allocate_block(sid, &["dn1".into()], BS, &[], None)
            .unwrap();
        let l1 = b1.block.unwrap().local_id;
        assert_eq!(seen(&s), (vec![(l1, 0, 0)], 0, true), "b1 is being written");
        // b1 is finished at 100 bytes; the next allocation reports it.
        b1.length = 100;
        let mut b2 = s
            .allocate_block(sid, &["dn1".into()], BS, std::slice::from_ref(&b1), None)
            .unwrap();
        let l2 = b2.block.unwrap().local_id;
        assert_eq!(seen(&s), (vec![(l1, 0, 100), (l2, 100, 0)], 100, true));
        // A report that is not an allocated block is refused, and changes
        // nothing.
        let stranger = KeyBlock {
            block: Some(BlockId {
                container_id: 99,
                local_id: 99,
                commit_seq: 0,
            }),
            length: 500,
            ..Default::default()
        };
        assert!(matches!(
            s.allocate_block(sid, &["dn1".into()], BS, &[stranger], None),
            Err(OmError::Invalid(_))
        ));
        assert_eq!(seen(&s), (vec![(l1, 0, 100), (l2, 100, 0)], 100, true));
        // hsync of 30 bytes of b2: the OM knows 130, b2 stays open.
        b2.length = 30;
        s.hsync_key(sid, &[b1.clone(), b2.clone()], 130, None)
            .unwrap();
        assert_eq!(seen(&s), (vec![(l1, 0, 100), (l2, 100, 30)], 130, true));
        // b2 fails and b3 replaces it: b2's replicas answer until an hsync
        // names b3 (the allocation's report of b1 alone shows less than
        // the hsync did, so it changes nothing).
        let mut b3 = s
            .allocate_block(sid, &["dn2".into()], BS, std::slice::from_ref(&b1), None)
            .unwrap();
        let l3 = b3.block.unwrap().local_id;
        assert_eq!(seen(&s), (vec![(l1, 0, 100), (l2, 100, 30)], 130, true));
        b3.length = 40;
        s.hsync_key(sid, &[b1, b3], 140, None).unwrap();
        assert_eq!(seen(&s), (vec![(l1, 0, 100), (l3, 100, 40)], 140, true));
    }

    #[test]
    fn the_namespace_survives_a_reopen() {
        let d = tempfile::tempdir().unwrap();
        {
            let s = new_bucket(d.path());
            write(&s, "x/y", 3);
            s.fs_rename(KeyPath::new("vol", "fsb", "x"), "x2", 2)
                .unwrap();
            s.sync().unwrap();
        }
        let s = store(d.path());
        assert_eq!(
            s.fs_status(KeyPath::new("vol", "fsb", "x2/y"))
                .unwrap()
                .size,
            3
        );
        assert_eq!(names(&s, ""), ["x2"]);
    }
}
