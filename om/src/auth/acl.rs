//! Access control lists of volumes and buckets, modelled on Apache Ozone's
//! native ACLs: entries `user:<namespace/serviceaccount>:<rights>`,
//! `group:<namespace>:<rights>` and `world::<rights>`, rights as Ozone's
//! letters (`r` read, `w` write, `c` create, `l` list, `d` delete, `x` read
//! the ACL, `y` write the ACL, `a` all, `n` none).

use std::fmt;

/// A set of rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Rights(u8);

impl Rights {
    /// No right.
    pub(crate) const NONE: Rights = Rights(0);
    /// Read keys and volume/bucket info.
    pub(crate) const READ: Rights = Rights(1);
    /// Write keys.
    pub(crate) const WRITE: Rights = Rights(1 << 1);
    /// Create buckets in a volume.
    pub(crate) const CREATE: Rights = Rights(1 << 2);
    /// List keys, or buckets of a volume.
    pub(crate) const LIST: Rights = Rights(1 << 3);
    /// Delete keys, or the bucket or volume itself.
    pub(crate) const DELETE: Rights = Rights(1 << 4);
    /// Read the ACL.
    pub(crate) const READ_ACL: Rights = Rights(1 << 5);
    /// Change the ACL and quotas.
    pub(crate) const WRITE_ACL: Rights = Rights(1 << 6);
    /// Every right.
    pub(crate) const ALL: Rights = Rights(0x7f);

    const LETTERS: [(char, Rights); 7] = [
        ('r', Rights::READ),
        ('w', Rights::WRITE),
        ('c', Rights::CREATE),
        ('l', Rights::LIST),
        ('d', Rights::DELETE),
        ('x', Rights::READ_ACL),
        ('y', Rights::WRITE_ACL),
    ];

    /// Whether every right of `other` is in `self`.
    pub(crate) fn contains(self, other: Rights) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets together.
    pub(crate) fn union(self, other: Rights) -> Rights {
        Rights(self.0 | other.0)
    }

    /// `self` without `other`.
    pub(crate) fn minus(self, other: Rights) -> Rights {
        Rights(self.0 & !other.0)
    }

    /// Parses Ozone's letters (`rw`, `a`, `n`, or names such as `READ`).
    pub(crate) fn parse(s: &str) -> Result<Rights, String> {
        if s.is_empty() {
            return Err("no rights given".into());
        }
        let named = match s.to_ascii_uppercase().as_str() {
            "READ" => Some(Rights::READ),
            "WRITE" => Some(Rights::WRITE),
            "CREATE" => Some(Rights::CREATE),
            "LIST" => Some(Rights::LIST),
            "DELETE" => Some(Rights::DELETE),
            "READ_ACL" => Some(Rights::READ_ACL),
            "WRITE_ACL" => Some(Rights::WRITE_ACL),
            "ALL" => Some(Rights::ALL),
            "NONE" => Some(Rights::NONE),
            _ => None,
        };
        if let Some(r) = named {
            return Ok(r);
        }
        let mut out = Rights::NONE;
        for c in s.chars() {
            out = out.union(match c {
                'a' => Rights::ALL,
                'n' => Rights::NONE,
                c => {
                    Self::LETTERS
                        .iter()
                        .find(|(l, _)| *l == c)
                        .ok_or_else(|| {
                            format!(
                                "unknown right {c:?} in {s:?} (rights are r w c l d x y, a for \
                                 all, n for none)"
                            )
                        })?
                        .1
                }
            });
        }
        Ok(out)
    }
}

impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Rights::ALL {
            return f.write_str("a");
        }
        if *self == Rights::NONE {
            return f.write_str("n");
        }
        for (c, r) in Self::LETTERS {
            if self.contains(r) {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// Whom an entry is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// One identity, `namespace/serviceaccount`.
    User(String),
    /// Every service account of a namespace.
    Group(String),
    /// Every authenticated caller.
    World,
}

/// One entry of an ACL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AclEntry {
    /// Whom it is for.
    pub subject: Subject,
    /// What it grants.
    pub rights: Rights,
}

impl AclEntry {
    /// Parses `user:ns/sa:rw`, `group:ns:r`, `world::l` (Ozone's form; a
    /// trailing `[ACCESS]` scope is accepted).
    pub(crate) fn parse(s: &str) -> Result<AclEntry, String> {
        let s = s.trim();
        let body = s.strip_suffix("[ACCESS]").unwrap_or(s);
        let mut parts = body.splitn(3, ':');
        let (Some(kind), Some(name), Some(rights)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!(
                "ACL entry {s:?} is not TYPE:NAME:RIGHTS (e.g. user:team-a/hbase:rw, \
                 group:team-a:r, world::l)"
            ));
        };
        let subject = match kind.to_ascii_lowercase().as_str() {
            "user" => {
                check_identity(name).map_err(|e| format!("ACL entry {s:?}: {e}"))?;
                Subject::User(name.to_string())
            }
            "group" => {
                if name.is_empty() || name.contains('/') {
                    return Err(format!(
                        "ACL entry {s:?}: a group is a Kubernetes namespace (no '/')"
                    ));
                }
                Subject::Group(name.to_string())
            }
            "world" if name.is_empty() => Subject::World,
            "world" => return Err(format!("ACL entry {s:?}: world takes no name (world::r)")),
            other => {
                return Err(format!(
                    "ACL entry {s:?}: unknown type {other:?} (user, group or world)"
                ));
            }
        };
        let rights = Rights::parse(rights).map_err(|e| format!("ACL entry {s:?}: {e}"))?;
        Ok(AclEntry { subject, rights })
    }

    fn same_subject(&self, other: &AclEntry) -> bool {
        self.subject == other.subject
    }
}

impl fmt::Display for AclEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Subject::User(n) => write!(f, "user:{n}:{}", self.rights),
            Subject::Group(n) => write!(f, "group:{n}:{}", self.rights),
            Subject::World => write!(f, "world::{}", self.rights),
        }
    }
}

/// Checks an identity's form: `namespace/serviceaccount`.
pub(crate) fn check_identity(name: &str) -> Result<(), String> {
    match name.split_once('/') {
        Some((ns, sa))
            if !ns.is_empty()
                && !sa.is_empty()
                && !sa.contains('/')
                && !name.contains(':')
                && !name.contains(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "{name:?} is not an identity: identities are namespace/serviceaccount"
        )),
    }
}

/// Parses stored or requested entries.
pub(crate) fn parse_all(entries: &[String]) -> Result<Vec<AclEntry>, String> {
    entries.iter().map(|e| AclEntry::parse(e)).collect()
}

/// Applies `op` with `given` to `current`: set replaces, add merges rights
/// into the entry of the same subject, remove takes rights away (entries
/// left with none are dropped).
pub(crate) fn apply(current: &[AclEntry], op: AclChange, given: &[AclEntry]) -> Vec<AclEntry> {
    match op {
        AclChange::Set => given
            .iter()
            .filter(|e| e.rights != Rights::NONE)
            .cloned()
            .collect(),
        AclChange::Add => {
            let mut out = current.to_vec();
            for g in given {
                match out.iter_mut().find(|e| e.same_subject(g)) {
                    Some(e) => e.rights = e.rights.union(g.rights),
                    None => out.push(g.clone()),
                }
            }
            out.retain(|e| e.rights != Rights::NONE);
            out
        }
        AclChange::Remove => {
            let mut out = current.to_vec();
            for g in given {
                if let Some(e) = out.iter_mut().find(|e| e.same_subject(g)) {
                    e.rights = e.rights.minus(g.rights);
                }
            }
            out.retain(|e| e.rights != Rights::NONE);
            out
        }
    }
}

/// How an ACL changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AclChange {
    /// Replace every entry.
    Set,
    /// Add rights.
    Add,
    /// Remove rights.
    Remove,
}

/// The rights `entries` give the identity `user` (namespace/serviceaccount).
pub(crate) fn granted(entries: &[AclEntry], user: &str) -> Rights {
    let ns = user.split_once('/').map(|(ns, _)| ns).unwrap_or("");
    entries
        .iter()
        .filter(|e| match &e.subject {
            Subject::User(u) => u == user,
            Subject::Group(g) => g == ns,
            Subject::World => true,
        })
        .fold(Rights::NONE, |acc, e| acc.union(e.rights))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_show() {
        for (text, shown) in [
            ("user:team-a/hbase:rw", "user:team-a/hbase:rw"),
            ("group:team-a:rl[ACCESS]", "group:team-a:rl"),
            ("world::a", "world::a"),
            ("user:a/b:READ", "user:a/b:r"),
            ("user:a/b:xy", "user:a/b:xy"),
        ] {
            assert_eq!(AclEntry::parse(text).unwrap().to_string(), shown);
        }
        for bad in [
            "user:nobody:r",
            "user:a/b:q",
            "group:a/b:r",
            "world:x:r",
            "role:a/b:r",
            "user:a/b",
            "user:a/b:",
        ] {
            assert!(AclEntry::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn grants_by_user_group_and_world() {
        let acl = parse_all(&[
            "user:team-a/hbase:rw".into(),
            "group:team-b:l".into(),
            "world::x".into(),
        ])
        .unwrap();
        assert_eq!(granted(&acl, "team-a/hbase").to_string(), "rwx");
        assert_eq!(granted(&acl, "team-a/other").to_string(), "x");
        assert_eq!(granted(&acl, "team-b/any").to_string(), "lx");
        assert!(!granted(&acl, "team-b/any").contains(Rights::READ));
    }

    #[test]
    fn add_merges_and_remove_drops_empty_entries() {
        let cur = parse_all(&["user:a/b:r".into()]).unwrap();
        let added = apply(
            &cur,
            AclChange::Add,
            &parse_all(&["user:a/b:w".into()]).unwrap(),
        );
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].to_string(), "user:a/b:rw");
        let removed = apply(
            &added,
            AclChange::Remove,
            &parse_all(&["user:a/b:a".into()]).unwrap(),
        );
        assert!(removed.is_empty());
        let set = apply(
            &added,
            AclChange::Set,
            &parse_all(&["world::l".into()]).unwrap(),
        );
        assert_eq!(set.len(), 1);
    }
}
