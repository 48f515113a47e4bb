//! Block tokens: the OM signs `(block, mode, expiry)` with HMAC-SHA256 under
//! a secret it shares with the datanodes, which check it before serving.

use hmac::{Hmac, Mac};
use ozone_proto::{BlockId, BlockReceipt, BlockToken, BlockTokenBody};
use prost::Message;
use sha2::Sha256;

/// Why a token was refused.
/// How an expired token is described to callers (clients recognise a refusal
/// for an expired token by it, and fetch a new one).
pub const EXPIRED_MESSAGE: &str = "block token expired";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("block token required but none was given")]
    Missing,
    #[error("block token is malformed")]
    Malformed,
    #[error("block token signature is invalid")]
    BadSignature,
    #[error("{msg} {0} ms ago", msg = EXPIRED_MESSAGE)]
    Expired(u64),
    #[error("block token is for block {granted}, not {wanted}")]
    WrongBlock { granted: String, wanted: String },
    #[error("block token grants {granted}, not {wanted}")]
    WrongMode { granted: String, wanted: String },
    #[error("block token secret must be at least 32 bytes (got {0})")]
    WeakSecret(usize),
    #[error("WRITE token is for datanodes {granted:?}, not {wanted}")]
    WrongDatanode {
        granted: Vec<String>,
        wanted: String,
    },
    #[error("WRITE token allows {max} bytes in the block; this write reaches {wanted}")]
    PastLimit { max: u64, wanted: u64 },
    #[error("command signature required but none was given")]
    CommandMissing,
    #[error("command signature is malformed")]
    CommandMalformed,
    #[error("command signature is invalid")]
    CommandBadSignature,
    #[error("command expired {0} ms ago")]
    CommandExpired(u64),
    #[error("no receipt from datanode {0}")]
    NoReceipt(String),
    #[error("receipt of datanode {datanode} does not vouch for {what}")]
    BadReceipt { datanode: String, what: String },
    #[error("command is for datanode {granted}, not {wanted}")]
    WrongTarget { granted: String, wanted: String },
    #[error("command expires too far ahead ({0} ms)")]
    TooLong(u64),
    #[error("command was already used (replayed)")]
    Replayed,
}

/// Longest validity a signed OM command may claim: a datanode refuses
/// commands that would stay usable (and so replayable) longer.
pub const MAX_COMMAND_VALIDITY_MS: u64 = 10 * 60 * 1000;

/// Signs and checks block tokens with one shared secret.
#[derive(Clone)]
pub struct TokenSigner {
    key: Vec<u8>,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSigner(..)")
    }
}

impl TokenSigner {
    /// A signer with `secret` (at least 32 bytes).
    pub fn new(secret: &[u8]) -> Result<Self, TokenError> {
        if secret.len() < 32 {
            return Err(TokenError::WeakSecret(secret.len()));
        }
        Ok(Self {
            key: secret.to_vec(),
        })
    }

    fn mac(&self, body: &[u8]) -> Hmac<Sha256> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        m.update(body);
        m
    }

    /// An encoded token for `block` in `mode`, valid until `expiry_ms`.
    pub fn sign(&self, block: &BlockId, mode: &str, expiry_ms: u64) -> Vec<u8> {
        self.sign_body(BlockTokenBody {
            container_id: block.container_id,
            local_id: block.local_id,
            expiry_ms,
            mode: mode.to_string(),
            ..Default::default()
        })
    }

    /// An encoded WRITE token for `block` on `datanodes` (ids), for at most
    /// `max_length` bytes, valid until `expiry_ms`.
    pub fn sign_write(
        &self,
        block: &BlockId,
        datanodes: &[String],
        max_length: u64,
        expiry_ms: u64,
    ) -> Vec<u8> {
        self.sign_body(BlockTokenBody {
            container_id: block.container_id,
            local_id: block.local_id,
            expiry_ms,
            mode: "WRITE".to_string(),
            max_length,
            datanodes: datanodes.to_vec(),
        })
    }

    fn sign_body(&self, body: BlockTokenBody) -> Vec<u8> {
        let mac = self
            .mac(&body.encode_to_vec())
            .finalize()
            .into_bytes()
            .to_vec();
        BlockToken {
            body: Some(body),
            mac,
        }
        .encode_to_vec()
    }

    /// Checks an encoded token for `block` and `mode` at time `now_ms`.
    pub fn verify(
        &self,
        token: &[u8],
        block: &BlockId,
        mode: &str,
        now_ms: u64,
    ) -> Result<(), TokenError> {
        self.verified_body(token, block, mode, now_ms).map(drop)
    }

    /// Checks a WRITE token for `block` at datanode `me`, for a write that
    /// reaches byte `end` of the block: the token must name `me` and allow
    /// at least `end` bytes.
    pub fn verify_write(
        &self,
        token: &[u8],
        block: &BlockId,
        me: &str,
        end: u64,
        now_ms: u64,
    ) -> Result<(), TokenError> {
        let body = self.verified_body(token, block, "WRITE", now_ms)?;
        if !body.datanodes.iter().any(|d| d == me) {
            return Err(TokenError::WrongDatanode {
                granted: body.datanodes,
                wanted: me.to_string(),
            });
        }
        if end > body.max_length {
            return Err(TokenError::PastLimit {
                max: body.max_length,
                wanted: end,
            });
        }
        Ok(())
    }

    fn verified_body(
        &self,
        token: &[u8],
        block: &BlockId,
        mode: &str,
        now_ms: u64,
    ) -> Result<BlockTokenBody, TokenError> {
        if token.is_empty() {
            return Err(TokenError::Missing);
        }
        let t = BlockToken::decode(token).map_err(|_| TokenError::Malformed)?;
        let body = t.body.ok_or(TokenError::Malformed)?;
        self.mac(&body.encode_to_vec())
            .verify_slice(&t.mac)
            .map_err(|_| TokenError::BadSignature)?;
        if body.container_id != block.container_id || body.local_id != block.local_id {
            return Err(TokenError::WrongBlock {
                granted: format!("{}:{}", body.container_id, body.local_id),
                wanted: block.display(),
            });
        }
        if body.mode != mode {
            return Err(TokenError::WrongMode {
                granted: body.mode,
                wanted: mode.to_string(),
            });
        }
        if body.expiry_ms < now_ms {
            return Err(TokenError::Expired(now_ms - body.expiry_ms));
        }
        Ok(body)
    }

    fn receipt_mac(
        &self,
        datanode: &str,
        block: &BlockId,
        length: u64,
        committed: bool,
    ) -> Hmac<Sha256> {
        let mut m = self.mac(b"ozone-receipt\0");
        m.update(&(datanode.len() as u64).to_le_bytes());
        m.update(datanode.as_bytes());
        for n in [block.container_id, block.local_id, length] {
            m.update(&n.to_le_bytes());
        }
        m.update(&[committed as u8]);
        m
    }

    /// Datanode `datanode`'s receipt: it holds `block` at `length` bytes,
    /// committed or (hsync) synced and open.
    pub fn sign_receipt(
        &self,
        datanode: &str,
        block: &BlockId,
        length: u64,
        committed: bool,
    ) -> BlockReceipt {
        BlockReceipt {
            datanode_id: datanode.to_string(),
            length,
            committed,
            mac: self
                .receipt_mac(datanode, block, length, committed)
                .finalize()
                .into_bytes()
                .to_vec(),
        }
    }

    /// Checks that `receipts` hold one from each of `datanodes` vouching for
    /// `block` at `length`; `committed`: only commit receipts count (a
    /// synced one is enough otherwise).
    pub fn verify_receipts(
        &self,
        receipts: &[BlockReceipt],
        block: &BlockId,
        datanodes: &[&str],
        length: u64,
        committed: bool,
    ) -> Result<(), TokenError> {
        for dn in datanodes {
            let ok = receipts.iter().filter(|r| r.datanode_id == *dn).any(|r| {
                r.length == length
                    && (r.committed || !committed)
                    && self
                        .receipt_mac(dn, block, length, r.committed)
                        .verify_slice(&r.mac)
                        .is_ok()
            });
            if ok {
                continue;
            }
            if !receipts.iter().any(|r| r.datanode_id == *dn) {
                return Err(TokenError::NoReceipt(dn.to_string()));
            }
            return Err(TokenError::BadReceipt {
                datanode: dn.to_string(),
                what: format!(
                    "block {} {} at {length} bytes",
                    block.display(),
                    if committed { "committed" } else { "held" }
                ),
            });
        }
        Ok(())
    }
}

/// What a service credential says: a cluster-internal process (a datanode)
/// of `role` named `name`, signed by the cluster secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceIdentity {
    /// The kind of process: `datanode`.
    pub role: String,
    /// Its id.
    pub name: String,
}

impl TokenSigner {
    /// A service credential (`role:name:expiry:mac`) for the `authorization`
    /// header, valid until `expiry_ms`. `role` and `name` hold no `:`.
    pub fn sign_service(&self, role: &str, name: &str, expiry_ms: u64) -> String {
        let mac = self
            .service_mac(role, name, expiry_ms)
            .finalize()
            .into_bytes();
        format!("{role}:{name}:{expiry_ms}:{}", hex(&mac))
    }

    fn service_mac(&self, role: &str, name: &str, expiry_ms: u64) -> Hmac<Sha256> {
        let mut m = self.mac(b"ozone-service\0");
        m.update(role.as_bytes());
        m.update(b"\0");
        m.update(name.as_bytes());
        m.update(b"\0");
        m.update(&expiry_ms.to_le_bytes());
        m
    }

    /// Checks a service credential at `now_ms`.
    pub fn verify_service(&self, cred: &str, now_ms: u64) -> Result<ServiceIdentity, TokenError> {
        let mut parts = cred.trim().splitn(4, ':');
        let (Some(role), Some(name), Some(expiry), Some(mac)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let expiry: u64 = expiry.parse().map_err(|_| TokenError::Malformed)?;
        let mac = unhex(mac).ok_or(TokenError::Malformed)?;
        self.service_mac(role, name, expiry)
            .verify_slice(&mac)
            .map_err(|_| TokenError::BadSignature)?;
        if expiry < now_ms {
            return Err(TokenError::Expired(now_ms - expiry));
        }
        Ok(ServiceIdentity {
            role: role.to_string(),
            name: name.to_string(),
        })
    }

    fn command_mac(
        &self,
        kind: &str,
        target: &str,
        expiry_ms: u64,
        nonce: &[u8],
        payload: &[u8],
    ) -> Hmac<Sha256> {
        let mut m = self.mac(b"ozone-command\0");
        for part in [kind.as_bytes(), target.as_bytes(), nonce] {
            m.update(&(part.len() as u64).to_le_bytes());
            m.update(part);
        }
        m.update(&expiry_ms.to_le_bytes());
        m.update(payload);
        m
    }

    /// Signs command `kind` (an RPC name) with `payload` (the request
    /// encoded without its signature) for datanode `target`, valid until
    /// `expiry_ms`, with a fresh random nonce.
    pub fn sign_command(
        &self,
        kind: &str,
        target: &str,
        payload: &[u8],
        expiry_ms: u64,
    ) -> ozone_proto::CommandAuth {
        let nonce: [u8; 16] = rand::random();
        let mac = self
            .command_mac(kind, target, expiry_ms, &nonce, payload)
            .finalize()
            .into_bytes()
            .to_vec();
        ozone_proto::CommandAuth {
            target: target.to_string(),
            expiry_ms,
            nonce: nonce.to_vec(),
            mac,
        }
    }

    /// Checks a signed command for datanode `me` at `now_ms`; the caller
    /// then checks that the nonce was not used before.
    pub fn verify_command(
        &self,
        auth: Option<&ozone_proto::CommandAuth>,
        kind: &str,
        me: &str,
        payload: &[u8],
        now_ms: u64,
    ) -> Result<(), TokenError> {
        let a = auth.ok_or(TokenError::CommandMissing)?;
        if a.nonce.len() < 16 {
            return Err(TokenError::CommandMalformed);
        }
        self.command_mac(kind, &a.target, a.expiry_ms, &a.nonce, payload)
            .verify_slice(&a.mac)
            .map_err(|_| TokenError::CommandBadSignature)?;
        if a.target != me {
            return Err(TokenError::WrongTarget {
                granted: a.target.clone(),
                wanted: me.to_string(),
            });
        }
        if a.expiry_ms < now_ms {
            return Err(TokenError::CommandExpired(now_ms - a.expiry_ms));
        }
        if a.expiry_ms - now_ms > MAX_COMMAND_VALIDITY_MS {
            return Err(TokenError::TooLong(a.expiry_ms - now_ms));
        }
        Ok(())
    }
}

/// How long a signed OM command stays valid: long enough for its delivery.
pub const COMMAND_VALIDITY_MS: u64 = 2 * 60 * 1000;

/// Signs `msg` (its `auth` field unset) as command `kind` for datanode
/// `target`, valid for [`COMMAND_VALIDITY_MS`].
pub fn sign_request<M: Message>(
    signer: &TokenSigner,
    kind: &str,
    target: &str,
    msg: &M,
) -> ozone_proto::CommandAuth {
    signer.sign_command(
        kind,
        target,
        &msg.encode_to_vec(),
        crate::now_ms() + COMMAND_VALIDITY_MS,
    )
}

/// Nonces of signed commands already accepted, kept until they expire: a
/// copied command is refused the second time.
#[derive(Debug, Default)]
pub struct NonceCache {
    seen: std::sync::Mutex<std::collections::HashMap<Vec<u8>, u64>>,
}

impl NonceCache {
    /// Records `nonce` (valid until `expiry_ms`); `Replayed` if it was seen.
    pub fn accept(&self, nonce: &[u8], expiry_ms: u64, now_ms: u64) -> Result<(), TokenError> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() > 4096 {
            seen.retain(|_, exp| *exp >= now_ms);
        }
        match seen.entry(nonce.to_vec()) {
            std::collections::hash_map::Entry::Occupied(_) => Err(TokenError::Replayed),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(expiry_ms);
                Ok(())
            }
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify() {
        let s = TokenSigner::new(&[7u8; 32]).unwrap();
        let b = BlockId {
            container_id: 1,
            local_id: 2,
            commit_seq: 0,
        };
        let t = s.sign(&b, "READ", 1000);
        s.verify(&t, &b, "READ", 999).unwrap();
        assert_eq!(
            s.verify(&t, &b, "READ", 1500),
            Err(TokenError::Expired(500))
        );
        assert!(matches!(
            s.verify(&t, &b, "WRITE", 0),
            Err(TokenError::WrongMode { .. })
        ));
        let other = BlockId { local_id: 3, ..b };
        assert!(matches!(
            s.verify(&t, &other, "READ", 0),
            Err(TokenError::WrongBlock { .. })
        ));
        let forged = TokenSigner::new(&[8u8; 32]).unwrap().sign(&b, "READ", 1000);
        assert_eq!(
            s.verify(&forged, &b, "READ", 0),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            s.verify(b"\xff\xff", &b, "READ", 0),
            Err(TokenError::Malformed)
        );
        assert_eq!(s.verify(b"", &b, "READ", 0), Err(TokenError::Missing));
        assert!(TokenSigner::new(b"short").is_err());
    }

    #[test]
    fn service_credentials() {
        let s = TokenSigner::new(&[7u8; 32]).unwrap();
        let c = s.sign_service("datanode", "dn-1", 1000);
        let id = s.verify_service(&c, 999).unwrap();
        assert_eq!((id.role.as_str(), id.name.as_str()), ("datanode", "dn-1"));
        assert_eq!(s.verify_service(&c, 1001), Err(TokenError::Expired(1)));
        let other = TokenSigner::new(&[8u8; 32]).unwrap();
        assert_eq!(other.verify_service(&c, 0), Err(TokenError::BadSignature));
        let renamed = c.replacen("dn-1", "dn-2", 1);
        assert_eq!(s.verify_service(&renamed, 0), Err(TokenError::BadSignature));
        assert_eq!(s.verify_service("garbage", 0), Err(TokenError::Malformed));
    }

    #[test]
    fn commands_bind_kind_target_payload_and_nonce() {
        let s = TokenSigner::new(&[7u8; 32]).unwrap();
        let a = s.sign_command("DeleteBlocks", "dn-1", b"payload", 60_000);
        s.verify_command(Some(&a), "DeleteBlocks", "dn-1", b"payload", 1000)
            .unwrap();
        assert!(matches!(
            s.verify_command(Some(&a), "DeleteBlocks", "dn-2", b"payload", 1000),
            Err(TokenError::WrongTarget { .. })
        ));
        for (kind, payload) in [
            ("ReplicateBlock", &b"payload"[..]),
            ("DeleteBlocks", b"other"),
        ] {
            assert_eq!(
                s.verify_command(Some(&a), kind, "dn-1", payload, 1000),
                Err(TokenError::CommandBadSignature)
            );
        }
        assert_eq!(
            s.verify_command(Some(&a), "DeleteBlocks", "dn-1", b"payload", 60_001),
            Err(TokenError::CommandExpired(1))
        );
        let long = s.sign_command("DeleteBlocks", "dn-1", b"p", MAX_COMMAND_VALIDITY_MS + 10);
        assert!(matches!(
            s.verify_command(Some(&long), "DeleteBlocks", "dn-1", b"p", 0),
            Err(TokenError::TooLong(_))
        ));
        assert_eq!(
            s.verify_command(None, "DeleteBlocks", "dn-1", b"p", 0),
            Err(TokenError::CommandMissing)
        );
        // Refusals of commands speak of commands, never of block tokens.
        for e in [
            TokenError::CommandMissing,
            TokenError::CommandMalformed,
            TokenError::CommandBadSignature,
            TokenError::CommandExpired(1),
        ] {
            let m = e.to_string();
            assert!(m.starts_with("command") && !m.contains("token"), "{m}");
        }
        let b = s.sign_command("DeleteBlocks", "dn-1", b"payload", 60_000);
        assert_ne!(a.nonce, b.nonce);
        let cache = NonceCache::default();
        cache.accept(&a.nonce, a.expiry_ms, 0).unwrap();
        cache.accept(&b.nonce, b.expiry_ms, 0).unwrap();
        assert_eq!(
            cache.accept(&a.nonce, a.expiry_ms, 0),
            Err(TokenError::Replayed)
        );
    }

    #[test]
    fn write_tokens_bind_datanodes_and_length() {
        let s = TokenSigner::new(&[7u8; 32]).unwrap();
        let b = BlockId {
            container_id: 1,
            local_id: 2,
            commit_seq: 0,
        };
        let dns = vec!["dn-1".to_string(), "dn-2".to_string()];
        let t = s.sign_write(&b, &dns, 4096, 60_000);
        s.verify_write(&t, &b, "dn-1", 4096, 0).unwrap();
        s.verify_write(&t, &b, "dn-2", 1, 0).unwrap();
        assert!(matches!(
            s.verify_write(&t, &b, "dn-3", 1, 0),
            Err(TokenError::WrongDatanode { .. })
        ));
        assert_eq!(
            s.verify_write(&t, &b, "dn-1", 4097, 0),
            Err(TokenError::PastLimit {
                max: 4096,
                wanted: 4097
            })
        );
        // A READ token is no WRITE token, and READ tokens still verify.
        let r = s.sign(&b, "READ", 60_000);
        assert!(s.verify_write(&r, &b, "dn-1", 1, 0).is_err());
        s.verify(&r, &b, "READ", 0).unwrap();
    }

    #[test]
    fn receipts_vouch_for_one_datanode_block_length_and_state() {
        let s = TokenSigner::new(&[7u8; 32]).unwrap();
        let b = BlockId {
            container_id: 1,
            local_id: 2,
            commit_seq: 0,
        };
        let other = BlockId { local_id: 3, ..b };
        let rs = vec![
            s.sign_receipt("dn-1", &b, 100, true),
            s.sign_receipt("dn-2", &b, 100, true),
        ];
        s.verify_receipts(&rs, &b, &["dn-1", "dn-2"], 100, true)
            .unwrap();
        assert!(matches!(
            s.verify_receipts(&rs, &b, &["dn-1", "dn-2"], 0, true),
            Err(TokenError::BadReceipt { .. })
        ));
        assert!(
            s.verify_receipts(&rs, &other, &["dn-1"], 100, true)
                .is_err()
        );
        assert_eq!(
            s.verify_receipts(&rs, &b, &["dn-1", "dn-3"], 100, true),
            Err(TokenError::NoReceipt("dn-3".into()))
        );
        // A receipt moved to another datanode's name does not verify.
        let mut moved = rs[0].clone();
        moved.datanode_id = "dn-3".into();
        assert!(
            s.verify_receipts(&[moved], &b, &["dn-3"], 100, true)
                .is_err()
        );
        // A synced receipt is enough for an hsync, not for a commit.
        let synced = vec![s.sign_receipt("dn-1", &b, 100, false)];
        s.verify_receipts(&synced, &b, &["dn-1"], 100, false)
            .unwrap();
        assert!(
            s.verify_receipts(&synced, &b, &["dn-1"], 100, true)
                .is_err()
        );
        // A length edited in the receipt does not verify.
        let mut edited = rs[0].clone();
        edited.length = 0;
        assert!(
            s.verify_receipts(&[edited], &b, &["dn-1"], 0, true)
                .is_err()
        );
    }
}
