//! Every configuration key, declared once: name (Apache Ozone's where one
//! exists), type, default, the roles that read it and a one-line doc. The
//! typed sections of each role, the unknown-key warnings, `ozone config` and
//! the README's table all come from this list.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use super::value::{
    Bytes, ChecksumAlgorithm, Ids, Names, Paths, ReplicationFactor, ShortCircuitMode, Value,
};

/// A process that reads configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The Ozone Manager.
    Om,
    /// A datanode.
    Datanode,
    /// The client library and `ozone sh`.
    Client,
    /// The client sidecar (its workload policy; it also builds a client).
    Sidecar,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 4] = [Role::Om, Role::Datanode, Role::Client, Role::Sidecar];

    /// Lower-case name, as `ozone config --role` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Om => "om",
            Role::Datanode => "datanode",
            Role::Client => "client",
            Role::Sidecar => "sidecar",
        }
    }

    /// The role named `s`.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// A key whose value parses into `T`.
#[derive(Debug)]
pub struct Key<T> {
    /// The key's name.
    pub name: &'static str,
    /// The default as it would be written in a file (`None`: unset).
    pub default: Option<&'static str>,
    /// The roles that read it.
    pub roles: &'static [Role],
    /// One line of documentation.
    pub doc: &'static str,
    ty: PhantomData<fn() -> T>,
}

/// A key's declaration without its type parameter.
#[derive(Debug, Clone, Copy)]
pub struct KeyDef {
    /// The key's name.
    pub name: &'static str,
    /// Type name (`bool`, `size`, `duration`, ...).
    pub kind: &'static str,
    /// What a valid value looks like.
    pub allowed: &'static str,
    /// The default as written in a file.
    pub default: Option<&'static str>,
    /// The roles that read it.
    pub roles: &'static [Role],
    /// One line of documentation.
    pub doc: &'static str,
    /// Whether a text is a valid value.
    pub valid: fn(&str) -> bool,
}

fn valid<T: Value>(text: &str) -> bool {
    T::parse(text).is_some()
}

impl<T: Value> Key<T> {
    const fn new(
        name: &'static str,
        default: Option<&'static str>,
        roles: &'static [Role],
        doc: &'static str,
    ) -> Self {
        Key {
            name,
            default,
            roles,
            doc,
            ty: PhantomData,
        }
    }

    /// The untyped declaration.
    pub const fn def(&self) -> KeyDef {
        KeyDef {
            name: self.name,
            kind: T::KIND,
            allowed: T::ALLOWED,
            default: self.default,
            roles: self.roles,
            doc: self.doc,
            valid: valid::<T>,
        }
    }
}

impl KeyDef {
    /// The doc line without the leading space of a doc comment.
    pub fn doc(&self) -> &'static str {
        self.doc.trim()
    }
}

macro_rules! keys {
    ($($(#[doc = $doc:literal])+ $id:ident: $ty:ty = $name:literal, $default:expr, [$($role:ident),+];)+) => {
        $(
            $(#[doc = $doc])+
            pub const $id: Key<$ty> = Key::new($name, $default, &[$(Role::$role),+], concat!($($doc),+));
        )+
        /// Every key, in declaration order.
        pub const ALL: &[KeyDef] = &[$($id.def()),+];
    };
}

keys! {
    /// OM address, host:port (also `--om` and `OZONE_OM_ADDRESS`).
    OM_ADDRESS: String = "ozone.om.address", None, [Client, Sidecar, Datanode];
    /// Verify checksums of data read (HBase turns it off: it checks its own HFile checksums).
    VERIFY_CHECKSUM: bool = "ozone.client.verify.checksum", Some("true"), [Client, Sidecar];
    /// Bytes per checksum window of new keys (1 byte to 64MB).
    BYTES_PER_CHECKSUM: Bytes = "ozone.client.bytes.per.checksum", Some("16KB"), [Client, Sidecar];
    /// Checksum type of new keys.
    CHECKSUM_TYPE: ChecksumAlgorithm = "ozone.client.checksum.type", Some("CRC32C"), [Client, Sidecar];
    /// Size of each write sent to a datanode.
    CHUNK_SIZE: Bytes = "ozone.scm.chunk.size", Some("4MB"), [Client, Sidecar];
    /// Replication of new keys.
    REPLICATION: ReplicationFactor = "ozone.replication", Some("THREE"), [Client, Sidecar];
    /// How long the client retries an OM it has reached before (a restarting OM).
    OM_RETRY_TIMEOUT: Duration = "ozone.client.om.retry.timeout", Some("60s"), [Client, Sidecar];
    /// How long a read from a datanode (a block read, a piece of a streamed read, a length asked of a block being written) may wait for an answer before the client moves to the next replica.
    READ_TIMEOUT: Duration = "ozone.client.read.timeout", Some("30s"), [Client, Sidecar];
    /// How long a write, flush or sync on a datanode may wait for an answer before the client treats that datanode as failed and moves the block to others.
    WRITE_TIMEOUT: Duration = "ozone.client.write.timeout", Some("60s"), [Client, Sidecar];
    /// Connection attempts to an OM not reached yet (refused, unknown host) before giving up.
    FAILOVER_MAX_ATTEMPTS: u64 = "ozone.client.failover.max.attempts", Some("3"), [Client, Sidecar];
    /// Milliseconds between two of those attempts.
    WAIT_BETWEEN_RETRIES: u64 = "ozone.client.wait.between.retries.millis", Some("500"), [Client, Sidecar];
    /// Short-circuit reads of local replicas.
    READ_SHORT_CIRCUIT: ShortCircuitMode = "ozone.client.read.short-circuit", Some("auto"), [Client, Sidecar];
    /// After a failed short-circuit attempt, how long a datanode is read over gRPC only.
    SHORT_CIRCUIT_BACKOFF: Duration = "ozone.client.read.short-circuit.backoff", Some("10s"), [Client, Sidecar];
    /// Block descriptors a client keeps open.
    SHORT_CIRCUIT_CACHE_SIZE: u64 = "ozone.client.read.short-circuit.cache.size", Some("1024"), [Client, Sidecar];
    /// Short-circuit reads from a mapping of the block file (a SIGBUS handler turns a file truncated under the reader into a failed read); false reads with `pread`, for hosts whose own SIGBUS handler does not chain.
    SHORT_CIRCUIT_MMAP: bool = "ozone.client.read.short-circuit.mmap", Some("true"), [Client, Sidecar];
    /// How long an unused block descriptor stays open.
    SHORT_CIRCUIT_CACHE_EXPIRY: Duration = "ozone.client.read.short-circuit.cache.expiry", Some("10m"), [Client, Sidecar];
    /// The node's short-circuit socket directory (a hostPath shared by the node's pods); unset turns short-circuit off.
    DOMAIN_SOCKET_PATH: PathBuf = "ozone.domain.socket.path", None, [Datanode, Client, Sidecar];
    /// Skip the socket directory's ownership and mode check (development only).
    DOMAIN_SOCKET_SKIP_CHECK: bool = "ozone.domain.socket.path.skip.security.check", Some("false"), [Datanode];
    /// Short-circuit connections a datanode serves at once.
    DOMAIN_SOCKET_MAX_CONNECTIONS: u64 = "ozone.domain.socket.max.connections", Some("256"), [Datanode];
    /// Short-circuit connections one peer uid may hold at once (refusals: `ozone_datanode_sc_refusals{reason="uid_limit"}`).
    DOMAIN_SOCKET_MAX_CONNECTIONS_PER_UID: u64 = "ozone.domain.socket.max.connections.per.uid", Some("128"), [Datanode];
    /// Open block descriptors per short-circuit connection (1 to 1048576).
    DOMAIN_SOCKET_SLOTS: u64 = "ozone.domain.socket.slots.per.connection", Some("4096"), [Datanode];
    /// Peer uids allowed on the socket (empty: any); a sidecar applies it to the applications it relays to the datanode.
    DOMAIN_SOCKET_ALLOWED_UIDS: Ids = "ozone.domain.socket.allowed.uids", Some(""), [Datanode, Sidecar];
    /// Peer gids allowed on the socket (empty: any).
    DOMAIN_SOCKET_ALLOWED_GIDS: Ids = "ozone.domain.socket.allowed.gids", Some(""), [Datanode];
    /// Sidecar: peer uids allowed on its UNIX sockets (empty: any; set it on a host where other users can reach them).
    SIDECAR_ALLOWED_UIDS: Ids = "ozone.sidecar.allowed.uids", Some(""), [Sidecar];
    /// Sidecar: whether a stream may ask for another verify-checksum setting than the policy's.
    SIDECAR_VERIFY_OVERRIDE: bool = "ozone.sidecar.verify.override.allowed", Some("true"), [Sidecar];
    /// Sidecar: relay the datanode sockets to the application (descriptor pass-through).
    SIDECAR_PASSTHROUGH: bool = "ozone.sidecar.passthrough.enabled", Some("true"), [Sidecar];
    /// Sidecar: a stream unused this long is closed (its application's reads reopen it).
    SIDECAR_STREAM_IDLE_TIMEOUT: Duration = "ozone.sidecar.stream.idle.timeout", Some("1h"), [Sidecar];
    /// `ozone sh` key commands go through the sidecar on this socket.
    CLIENT_SIDECAR_SOCKET: PathBuf = "ozone.client.sidecar.socket", None, [Client];
    /// Block size: a key is split into blocks of this size.
    BLOCK_SIZE: Bytes = "ozone.scm.block.size", Some("256MB"), [Om];
    /// A datanode silent this long is stale (no new replicas).
    STALE_NODE_INTERVAL: Duration = "ozone.scm.stale.node.interval", Some("30s"), [Om];
    /// A datanode silent this long is dead.
    DEAD_NODE_INTERVAL: Duration = "ozone.scm.dead.node.interval", Some("90s"), [Om];
    /// How often the OM hands deleted blocks to datanodes.
    BLOCK_DELETING_INTERVAL: Duration = "ozone.block.deleting.service.interval", Some("1s"), [Om];
    /// OM: a write session idle this long (an object-store key, or a file without a block) is dropped and its blocks deleted.
    OPEN_KEY_EXPIRE: Duration = "ozone.om.open.key.expire.threshold", Some("7d"), [Om];
    /// OM: a file being written idle this long is lease-recovered (block recovery keeps what readers could see).
    LEASE_HARD_LIMIT: Duration = "ozone.om.lease.hard.limit", Some("7d"), [Om];
    /// OM: period of the open-key cleanup.
    OPEN_KEY_CLEANUP_INTERVAL: Duration = "ozone.om.open.key.cleanup.service.interval", Some("1m"), [Om];
    /// Largest gRPC message accepted.
    MAX_MESSAGE_SIZE: Bytes = "ozone.grpc.max.message.size", Some("64MB"), [Om, Datanode, Client, Sidecar];
    /// Datanode heartbeat period.
    HEARTBEAT_INTERVAL: Duration = "hdds.heartbeat.interval", Some("3s"), [Datanode];
    /// Datanode: check the checksums of every write.
    DATANODE_VERIFY_WRITES: bool = "hdds.datanode.verify.write.checksum", Some("true"), [Datanode];
    /// Datanode: scan committed replicas in the background against their
    /// checksums (corrupt ones are reported to the OM and no longer served).
    SCRUB_ENABLED: bool = "hdds.container.scrub.enabled", Some("true"), [Datanode];
    /// Datanode: pause between two full scans of the replicas.
    SCRUB_INTERVAL: Duration = "hdds.container.scrub.data.scan.interval", Some("7d"), [Datanode];
    /// Datanode: scan rate, bytes per second (gentle by default).
    SCRUB_BYTES_PER_SECOND: Bytes = "hdds.container.scrub.volume.bytes.per.second", Some("5MB"), [Datanode];
    /// Datanode: replica copies (asked by the OM's replication manager) running at once.
    REPLICATION_STREAMS: u64 = "hdds.datanode.replication.streams.limit", Some("10"), [Datanode];
    /// Datanode: bytes per second received by replica copies, all together (0: unpaced).
    REPLICATION_BYTES_PER_SECOND: Bytes = "hdds.datanode.replication.bytes.per.second", Some("50MB"), [Datanode];
    /// Datanode: period of the full replica report (changes go with every heartbeat).
    CONTAINER_REPORT_INTERVAL: Duration = "hdds.container.report.interval", Some("10m"), [Datanode];
    /// OM: period of the replication manager's pass over every block.
    REPLICATION_INTERVAL: Duration = "hdds.scm.replication.thread.interval", Some("10s"), [Om];
    /// OM: replica copies in flight per datanode (as source or target).
    REPLICATION_LIMIT: u64 = "hdds.scm.replication.datanode.replication.limit", Some("20"), [Om];
    /// OM: a copy not finished after this long is given up and may be asked again.
    REPLICATION_TIMEOUT: Duration = "hdds.scm.replication.event.timeout", Some("10m"), [Om];
    /// OM: healthy replicas a block keeps while one of its datanodes is in maintenance.
    MAINTENANCE_REPLICA_MINIMUM: u64 = "hdds.scm.replication.maintenance.replica.minimum", Some("2"), [Om];
    /// Datanode data directories (also `--data-dir`).
    DATA_DIRS: Paths = "hdds.datanode.dir", None, [Datanode];
    /// Datanode metadata directory (also `--metadata-dir`).
    METADATA_DIRS: PathBuf = "ozone.metadata.dirs", None, [Datanode];
    /// Block tokens: the OM signs one per block, datanodes check it.
    BLOCK_TOKEN_ENABLED: bool = "hdds.block.token.enabled", Some("false"), [Om, Datanode];
    /// File holding the shared block-token secret (at least 32 bytes).
    BLOCK_TOKEN_SECRET_FILE: PathBuf = "hdds.block.token.secret.file", None, [Om, Datanode];
    /// Lifetime of a block token.
    BLOCK_TOKEN_EXPIRY: Duration = "hdds.block.token.expiry.time", Some("24h"), [Om];
    /// OM: every call must carry credentials; volumes and buckets have owners and ACLs (needs block tokens).
    SECURITY_ENABLED: bool = "ozone.security.enabled", Some("false"), [Om];
    /// OM: admin identities (namespace/serviceaccount, `*` for all) when security is on.
    ADMINISTRATORS: Names = "ozone.administrators", Some(""), [Om];
    /// OM: namespaces whose every ServiceAccount is an admin.
    ADMINISTRATORS_GROUPS: Names = "ozone.administrators.groups", Some(""), [Om];
    /// OM: client tokens from this file (`token,namespace/serviceaccount[,expiry]`) instead of the API server's TokenReview.
    TOKEN_AUTH_FILE: PathBuf = "ozone.om.token.auth.file", None, [Om];
    /// OM: the audience clients' ServiceAccount tokens must be minted for.
    TOKEN_AUDIENCE: String = "ozone.om.token.audience", Some("ozone"), [Om];
    /// Client: file holding the token presented to the OM (a projected ServiceAccount token; re-read when it changes).
    CLIENT_TOKEN_FILE: PathBuf = "ozone.client.token.file", None, [Client, Sidecar];
    /// TLS on every gRPC port and connection (the short-circuit socket stays local).
    GRPC_TLS_ENABLED: bool = "hdds.grpc.tls.enabled", Some("false"), [Om, Datanode, Client, Sidecar];
    /// Directory holding `ca.crt`, `tls.crt` and `tls.key` (a Kubernetes TLS Secret); re-read when it changes.
    GRPC_TLS_DIR: PathBuf = "hdds.grpc.tls.dir", None, [Om, Datanode, Client, Sidecar];
}

/// The declaration of `name`.
pub fn find(name: &str) -> Option<&'static KeyDef> {
    ALL.iter().find(|k| k.name == name)
}

/// The declared key closest to an unknown `name` (a likely typo).
pub fn closest(name: &str) -> Option<&'static str> {
    ALL.iter()
        .map(|k| (edit_distance(name, k.name), k.name))
        .filter(|(d, _)| *d <= 3.max(name.len() / 6))
        .min()
        .map(|(_, n)| n)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// A config file for `role` with every key it reads commented out at its
/// default, each under its description: a starting point to edit.
pub fn template(role: Role) -> String {
    let mut out = format!(
        "# Ozone configuration read by the {} (`key = value`; a `#` line is a comment).\n\
         # Every key is shown at its default: uncomment a line to change it.\n",
        role.as_str()
    );
    for k in ALL.iter().filter(|k| k.roles.contains(&role)) {
        out.push('\n');
        for line in k.doc().split(". ") {
            out.push_str(&format!("# {}\n", line.trim_end_matches('.')));
        }
        match k.default {
            Some(d) => out.push_str(&format!("# {} = {d}\n", k.name)),
            None => out.push_str(&format!("# {} =\n", k.name)),
        }
    }
    out
}

/// The Markdown table of every key (the README's configuration table).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| Key | Type | Default | Read by | What it does |\n| --- | --- | --- | --- | --- |\n",
    );
    for k in ALL {
        let roles: Vec<&str> = k.roles.iter().map(|r| r.as_str()).collect();
        let default = match k.default {
            None => "(unset)".to_string(),
            Some("") => "(empty)".to_string(),
            Some(d) => format!("`{d}`"),
        };
        let kind = if k.kind == "choice" {
            k.allowed.to_string()
        } else {
            k.kind.to_string()
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            k.name,
            kind,
            default,
            roles.join(", "),
            k.doc()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_sound() {
        let mut names = std::collections::BTreeSet::new();
        for k in ALL {
            assert!(names.insert(k.name), "{} declared twice", k.name);
            if let Some(d) = k.default {
                assert!((k.valid)(d), "default {d:?} of {} does not parse", k.name);
            }
            assert!(!k.doc().is_empty() && !k.roles.is_empty(), "{}", k.name);
        }
        assert_eq!(find("ozone.client.verify.checksum").unwrap().kind, "bool");
    }

    /// The README's configuration table is this declaration's.
    #[test]
    fn readme_table_is_current() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        let begin = "<!-- config-table:begin -->\n";
        let start = readme.find(begin).expect("README config table markers") + begin.len();
        let end = readme.find("<!-- config-table:end -->").unwrap();
        assert!(
            readme[start..end] == markdown_table(),
            "README.md's configuration table is stale: replace it with `ozone config --markdown`"
        );
    }

    /// The template parses, sets nothing, and names every key of the role.
    #[test]
    fn templates_name_every_key_and_set_none() {
        for role in Role::ALL {
            let t = template(role);
            let conf = super::super::Conf::parse(&t, "template").unwrap();
            assert_eq!(conf.iter().count(), 0, "{t}");
            for k in ALL.iter().filter(|k| k.roles.contains(&role)) {
                assert!(t.contains(&format!("# {} =", k.name)), "{}", k.name);
            }
            // Uncommented, every line with a default is a valid setting.
            let on: String = t
                .lines()
                .filter(|l| l.starts_with("# ") && l.contains(" = "))
                .map(|l| format!("{}\n", &l[2..]))
                .collect();
            let conf = super::super::Conf::parse(&on, "uncommented").unwrap();
            conf.validate().unwrap();
        }
    }

    #[test]
    fn typos_find_the_key_meant() {
        assert_eq!(
            closest("ozone.client.verfy.checksum"),
            Some("ozone.client.verify.checksum")
        );
        assert_eq!(
            closest("ozone.client.read.shortcircuit"),
            Some("ozone.client.read.short-circuit")
        );
        assert_eq!(closest("ozone.something.else.entirely"), None);
    }
}
