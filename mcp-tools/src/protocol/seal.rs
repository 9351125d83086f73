//! Opaque, signed pagination cursors that carry their own position.
//!
//! A cursor is `base64url(position ‖ listing fingerprint ‖ HMAC-SHA256 tag)`. The tag covers the
//! list kind too, so a cursor of one listing cannot page another. Any replica holding the same key
//! continues a listing another replica started; nothing is remembered between requests.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const TAG_LEN: usize = 16;
const BODY_LEN: usize = 4 + 8;

/// Why a cursor was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    /// Not base64url or the wrong length.
    #[error("the cursor is malformed")]
    Malformed,
    /// The tag does not verify: tampered, or signed with another key.
    #[error("the cursor was not issued by this server or was altered")]
    BadSignature,
    /// The listing changed since the cursor was issued.
    #[error("the listing changed since the cursor was issued; list again from the start")]
    Stale,
}

/// Signs and verifies cursors under one key.
#[derive(Clone)]
pub(crate) struct CursorCodec {
    key: Arc<[u8]>,
}

impl CursorCodec {
    pub(crate) fn new(key: &[u8]) -> Self {
        CursorCodec { key: key.into() }
    }

    fn mac(&self, kind: &str, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC accepts keys of any length");
        mac.update(kind.as_bytes());
        mac.update(&[0]);
        mac.update(body);
        mac
    }

    pub(crate) fn encode(&self, kind: &str, position: u32, fingerprint: u64) -> String {
        let mut bytes = Vec::with_capacity(BODY_LEN + TAG_LEN);
        bytes.extend_from_slice(&position.to_be_bytes());
        bytes.extend_from_slice(&fingerprint.to_be_bytes());
        let tag = self.mac(kind, &bytes).finalize().into_bytes();
        bytes.extend_from_slice(&tag[..TAG_LEN]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    pub(crate) fn decode(
        &self,
        kind: &str,
        cursor: &str,
        fingerprint: u64,
    ) -> Result<u32, CursorError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| CursorError::Malformed)?;
        if bytes.len() != BODY_LEN + TAG_LEN {
            return Err(CursorError::Malformed);
        }
        let (body, tag) = bytes.split_at(BODY_LEN);
        self.mac(kind, body)
            .verify_truncated_left(tag)
            .map_err(|_| CursorError::BadSignature)?;
        let position = u32::from_be_bytes(body[..4].try_into().expect("4 bytes"));
        let issued_for = u64::from_be_bytes(body[4..].try_into().expect("8 bytes"));
        if issued_for != fingerprint {
            return Err(CursorError::Stale);
        }
        Ok(position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_tampering() {
        let codec = CursorCodec::new(b"key-one");
        let cursor = codec.encode("tools", 7, 42);
        assert_eq!(codec.decode("tools", &cursor, 42), Ok(7));
        assert_eq!(
            codec.decode("prompts", &cursor, 42),
            Err(CursorError::BadSignature)
        );
        assert_eq!(codec.decode("tools", &cursor, 43), Err(CursorError::Stale));
        assert_eq!(
            CursorCodec::new(b"key-two").decode("tools", &cursor, 42),
            Err(CursorError::BadSignature)
        );
        let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        bytes[3] ^= 1;
        assert_eq!(
            codec.decode("tools", &URL_SAFE_NO_PAD.encode(bytes), 42),
            Err(CursorError::BadSignature)
        );
        assert_eq!(
            codec.decode("tools", "not a cursor!", 42),
            Err(CursorError::Malformed)
        );
        assert_eq!(codec.decode("tools", "", 42), Err(CursorError::Malformed));
    }
}
