//! Block tokens: the OM signs `(block, mode, expiry)` with HMAC-SHA256 under
//! a secret it shares with the datanodes, which check it before serving.

use hmac::{Hmac, Mac};
use ozone_proto::{BlockId, BlockToken, BlockTokenBody};
use prost::Message;
use sha2::Sha256;

/// Why a token was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("block token required but none was given")]
    Missing,
    #[error("block token is malformed")]
    Malformed,
    #[error("block token signature is invalid")]
    BadSignature,
    #[error("block token expired {0} ms ago")]
    Expired(u64),
    #[error("block token is for block {granted}, not {wanted}")]
    WrongBlock { granted: String, wanted: String },
    #[error("block token grants {granted}, not {wanted}")]
    WrongMode { granted: String, wanted: String },
    #[error("block token secret must be at least 32 bytes (got {0})")]
    WeakSecret(usize),
}

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
        let body = BlockTokenBody {
            container_id: block.container_id,
            local_id: block.local_id,
            expiry_ms,
            mode: mode.to_string(),
        };
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
        Ok(())
    }
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
}
