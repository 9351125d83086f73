//! The opaque values this server hands to clients and takes back: pagination cursors and the
//! `requestState` of multi-round requests. Both are sealed by one primitive, HMAC-SHA256 over a
//! domain label and the value, so a value of one kind never verifies as another and any replica
//! holding the same key verifies what another issued. Nothing is remembered between requests.
//!
//! A cursor is `base64url(position ‖ listing fingerprint ‖ tag)`, its tag covering the listing
//! kind, so a cursor of one listing cannot page another. A request state is
//! `base64url(payload ‖ tag)` where the payload is JSON: a digest of what the state is bound to
//! (the method and target, the caller, the arguments), its expiry and the tool's own state. It is
//! signed, not encrypted: the client can read it.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::protocol::error::RpcError;

/// Tags are truncated to 128 bits: enough against forgery, shorter on the wire.
const TAG_LEN: usize = 16;
const CURSOR_BODY_LEN: usize = 4 + 8;
/// How long a sealed request state stays valid.
const STATE_LIFETIME_SECS: u64 = 15 * 60;

const CURSOR_DOMAIN: &[u8] = b"mcp-tools/cursor\0";
const REQUEST_STATE_DOMAIN: &[u8] = b"mcp-tools/request-state\0";
const VALIDATOR_DOMAIN: &[u8] = b"mcp-tools/validator\0";
const TRACE_DOMAIN: &[u8] = b"mcp-tools/trace-handle\0";
const TASK_DOMAIN: &[u8] = b"mcp-tools/task-id\0";
const VALIDATOR_BODY_LEN: usize = 8;
const ITEMS_CURSOR_DOMAIN: &[u8] = b"mcp-tools/items-cursor\0";

/// Why a cursor was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CursorError {
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

/// The binding target of a tool call's request state.
pub(crate) fn tool_call_target(tool: &str) -> String {
    format!("tools/call:{tool}")
}

/// What a sealed request state is bound to.
pub(crate) struct Binding<'a> {
    pub(crate) target: &'a str,
    pub(crate) principal: &'a str,
    pub(crate) arguments: &'a Value,
}

/// Seals and opens every value this server hands out, under one key.
#[derive(Clone)]
pub(crate) struct Seal {
    /// The MAC keyed with the signing key. Every key is keyed once and cloned for each tag:
    /// keying hashes two blocks that every tag would otherwise hash again.
    keyed: Hmac<Sha256>,
    /// Keys that still verify what they signed, each until its time (seconds since the epoch),
    /// so replicas can roll the key without breaking open listings, rounds or validators.
    accepted: Arc<[(Hmac<Sha256>, u64)]>,
}

impl Seal {
    #[cfg(test)]
    pub(crate) fn new(key: &[u8]) -> Self {
        Seal::rotating(key, Vec::new())
    }

    /// A seal that signs with `key` and also verifies with each of `accepted` until its time.
    pub(crate) fn rotating(key: &[u8], accepted: Vec<(Vec<u8>, u64)>) -> Self {
        Seal {
            keyed: keyed(key),
            accepted: accepted
                .into_iter()
                .map(|(key, until)| (keyed(&key), until))
                .collect(),
        }
    }

    fn mac(&self, domain: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
        absorb(self.keyed.clone(), domain, parts)
    }

    fn tag(&self, domain: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let full = self.mac(domain, parts).finalize().into_bytes();
        full[..TAG_LEN].try_into().expect("a SHA-256 tag is longer")
    }

    fn verifies(&self, domain: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        if self.mac(domain, parts).verify_truncated_left(tag).is_ok() {
            return true;
        }
        let now = now();
        self.accepted.iter().any(|(key, until)| {
            *until > now
                && absorb(key.clone(), domain, parts)
                    .verify_truncated_left(tag)
                    .is_ok()
        })
    }

    /// A cursor for `position` in the listing `kind` whose content has `fingerprint`.
    pub(crate) fn cursor(&self, kind: &str, position: u32, fingerprint: u64) -> String {
        let mut bytes = Vec::with_capacity(CURSOR_BODY_LEN + TAG_LEN);
        bytes.extend_from_slice(&position.to_be_bytes());
        bytes.extend_from_slice(&fingerprint.to_be_bytes());
        let tag = self.tag(CURSOR_DOMAIN, &[kind.as_bytes(), &bytes]);
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The position a cursor of listing `kind` points at, if it verifies and the listing still
    /// has `fingerprint`.
    pub(crate) fn open_cursor(
        &self,
        kind: &str,
        cursor: &str,
        fingerprint: u64,
    ) -> Result<u32, CursorError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| CursorError::Malformed)?;
        if bytes.len() != CURSOR_BODY_LEN + TAG_LEN {
            return Err(CursorError::Malformed);
        }
        let (body, tag) = bytes.split_at(CURSOR_BODY_LEN);
        if !self.verifies(CURSOR_DOMAIN, &[kind.as_bytes(), body], tag) {
            return Err(CursorError::BadSignature);
        }
        let position = u32::from_be_bytes(body[..4].try_into().expect("4 bytes"));
        let issued_for = u64::from_be_bytes(body[4..].try_into().expect("8 bytes"));
        if issued_for != fingerprint {
            return Err(CursorError::Stale);
        }
        Ok(position)
    }

    /// A keyed digest of a handle for traces: it tells the calls on one resource apart and
    /// correlates them across replicas sharing the key, without giving whoever reads the traces
    /// the handle itself.
    pub(crate) fn trace_digest(&self, handle: &str) -> String {
        let tag = self.tag(TRACE_DOMAIN, &[handle.as_bytes()]);
        tag[..8].iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// The id of the task a call with an operation id makes: the same for every retry of that
    /// call on every replica sharing the key, and unguessable without the key.
    pub(crate) fn task_id(&self, owner: &str, tool: &str, operation_id: &str) -> String {
        task_id_from(self.mac(
            TASK_DOMAIN,
            &[owner.as_bytes(), tool.as_bytes(), operation_id.as_bytes()],
        ))
    }

    /// The ids the keys still accepted would have given the same call: during a key roll, a
    /// retry finds the task the call made under the key it was made with.
    pub(crate) fn earlier_task_ids(
        &self,
        owner: &str,
        tool: &str,
        operation_id: &str,
    ) -> Vec<String> {
        let now = now();
        self.accepted
            .iter()
            .filter(|(_, until)| *until > now)
            .map(|(key, _)| {
                task_id_from(absorb(
                    key.clone(),
                    TASK_DOMAIN,
                    &[owner.as_bytes(), tool.as_bytes(), operation_id.as_bytes()],
                ))
            })
            .collect()
    }

    /// The validator of `version` of the resource `handle` of `kind`: an opaque string that
    /// stands for that version of that resource only, so a harness can pass it back in place
    /// of a version number the model would have to copy.
    pub(crate) fn validator(&self, kind: &str, handle: &str, version: u64) -> String {
        let body = version.to_be_bytes();
        let tag = self.tag(
            VALIDATOR_DOMAIN,
            &[kind.as_bytes(), handle.as_bytes(), &body],
        );
        let mut bytes = Vec::with_capacity(VALIDATOR_BODY_LEN + TAG_LEN);
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The version a validator stands for, if this server issued it for this resource: `None`
    /// for a forged, altered or truncated validator and for one of another resource.
    pub(crate) fn open_validator(&self, kind: &str, handle: &str, validator: &str) -> Option<u64> {
        let bytes = URL_SAFE_NO_PAD.decode(validator).ok()?;
        if bytes.len() != VALIDATOR_BODY_LEN + TAG_LEN {
            return None;
        }
        let (body, tag) = bytes.split_at(VALIDATOR_BODY_LEN);
        self.verifies(
            VALIDATOR_DOMAIN,
            &[kind.as_bytes(), handle.as_bytes(), body],
            tag,
        )
        .then(|| u64::from_be_bytes(body.try_into().expect("8 bytes")))
    }

    /// The cursor of the page of collection `field` of the resource `handle` of `kind` after
    /// item `after`: only this server's replicas issue it, and only for this resource.
    pub(crate) fn items_cursor(&self, kind: &str, handle: &str, field: &str, after: u64) -> String {
        let mut bytes = Vec::with_capacity(8 + field.len() + TAG_LEN);
        bytes.extend_from_slice(&after.to_be_bytes());
        bytes.extend_from_slice(field.as_bytes());
        let tag = self.tag(
            ITEMS_CURSOR_DOMAIN,
            &[kind.as_bytes(), handle.as_bytes(), &bytes],
        );
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The collection and the id a cursor of [`Seal::items_cursor`] points after, if this
    /// server issued it for this resource.
    pub(crate) fn open_items_cursor(
        &self,
        kind: &str,
        handle: &str,
        cursor: &str,
    ) -> Option<(String, u64)> {
        let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
        if bytes.len() < 8 + TAG_LEN {
            return None;
        }
        let (body, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        if !self.verifies(
            ITEMS_CURSOR_DOMAIN,
            &[kind.as_bytes(), handle.as_bytes(), body],
            tag,
        ) {
            return None;
        }
        let (after, field) = body.split_at(8);
        let after = u64::from_be_bytes(after.try_into().ok()?);
        Some((String::from_utf8(field.to_vec()).ok()?, after))
    }

    /// Seals a tool's `state` for the retry of the request described by `binding`.
    pub(crate) fn request_state(&self, binding: &Binding<'_>, state: Option<&Value>) -> String {
        let payload = super::json_text(&json!({
            "b": digest(binding),
            "e": now() + STATE_LIFETIME_SECS,
            "s": state,
        }));
        let tag = self.tag(REQUEST_STATE_DOMAIN, &[payload.as_bytes()]);
        let mut bytes = payload.into_bytes();
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The state a tool sealed, after checking integrity, binding and expiry.
    pub(crate) fn open_request_state(
        &self,
        binding: &Binding<'_>,
        sealed: &str,
    ) -> Result<Option<Value>, RpcError> {
        let invalid = |why: &str| {
            RpcError::invalid_params(format!(
                "Invalid requestState: {why}; retry the original request without requestState"
            ))
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(sealed)
            .map_err(|_| invalid("not issued by this server"))?;
        if bytes.len() <= TAG_LEN {
            return Err(invalid("not issued by this server"));
        }
        let (payload, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        if !self.verifies(REQUEST_STATE_DOMAIN, &[payload], tag) {
            return Err(invalid("it was altered or not issued by this server"));
        }
        let payload: Value =
            serde_json::from_slice(payload).map_err(|_| invalid("not issued by this server"))?;
        if payload["b"].as_str() != Some(digest(binding).as_str()) {
            return Err(invalid("it belongs to another request"));
        }
        if payload["e"].as_u64().is_none_or(|expiry| expiry < now()) {
            return Err(invalid("it has expired"));
        }
        Ok(match payload.get("s") {
            None | Some(Value::Null) => None,
            Some(state) => Some(state.clone()),
        })
    }
}

/// A MAC keyed with `key`.
fn keyed(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length")
}

/// `mac` fed the domain, then the parts, each but the last followed by a 0 byte, so no two
/// sequences of parts give the same input.
/// A task id from its MAC: `tsk_` and 32 hexadecimal digits.
fn task_id_from(mac: Hmac<Sha256>) -> String {
    let full = mac.finalize().into_bytes();
    let hex: String = full[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("tsk_{hex}")
}

fn absorb(mut mac: Hmac<Sha256>, domain: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    mac.update(domain);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            mac.update(&[0]);
        }
        mac.update(part);
    }
    mac
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn digest(binding: &Binding<'_>) -> String {
    let hash = Sha256::new()
        .chain_update(binding.target.as_bytes())
        .chain_update([0])
        .chain_update(binding.principal.as_bytes())
        .chain_update([0])
        .chain_update(super::json_text(binding.arguments).as_bytes())
        .finalize();
    URL_SAFE_NO_PAD.encode(&hash[..16])
}

#[cfg(test)]
mod cursor_tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_tampering() {
        let codec = Seal::new(b"key-one");
        let cursor = codec.cursor("tools", 7, 42);
        assert_eq!(codec.open_cursor("tools", &cursor, 42), Ok(7));
        assert_eq!(
            codec.open_cursor("prompts", &cursor, 42),
            Err(CursorError::BadSignature)
        );
        assert_eq!(
            codec.open_cursor("tools", &cursor, 43),
            Err(CursorError::Stale)
        );
        assert_eq!(
            Seal::new(b"key-two").open_cursor("tools", &cursor, 42),
            Err(CursorError::BadSignature)
        );
        let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        bytes[3] ^= 1;
        assert_eq!(
            codec.open_cursor("tools", &URL_SAFE_NO_PAD.encode(bytes), 42),
            Err(CursorError::BadSignature)
        );
        assert_eq!(
            codec.open_cursor("tools", "not a cursor!", 42),
            Err(CursorError::Malformed)
        );
        assert_eq!(
            codec.open_cursor("tools", "", 42),
            Err(CursorError::Malformed)
        );
    }
}

#[cfg(test)]
mod request_state_tests {
    use super::*;

    /// A request state lives for minutes, across a rolling upgrade: the binding digest a new
    /// replica computes must be the one an older replica sealed.
    #[test]
    fn the_binding_digest_is_pinned() {
        let arguments = json!({ "z": [1.5, -2, null], "a": "x\"y\u{1}", "m": {} });
        let binding = Binding {
            target: "tools/call basket_add",
            principal: "alice",
            arguments: &arguments,
        };
        // SHA-256 of target, 0, principal, 0 and the arguments' compact JSON with sorted keys
        // (`{"a":"x\"y\u0001","m":{},"z":[1.5,-2,null]}`), first 16 bytes, URL-safe base64;
        // computed outside this code.
        assert_eq!(digest(&binding), "29uLauckFYvh9jYEK_U7vg");
    }

    #[test]
    fn sealed_state_opens_only_for_its_binding() {
        let seal = Seal::new(b"k");
        let args = json!({ "x": 1 });
        let binding = Binding {
            target: "tool",
            principal: "",
            arguments: &args,
        };
        let sealed = seal.request_state(&binding, Some(&json!({ "round": 2 })));
        assert_eq!(
            seal.open_request_state(&binding, &sealed).unwrap(),
            Some(json!({ "round": 2 }))
        );
        let other_args = json!({ "x": 2 });
        let other = Binding {
            target: "tool",
            principal: "",
            arguments: &other_args,
        };
        assert!(seal.open_request_state(&other, &sealed).is_err());
        assert!(
            Seal::new(b"other")
                .open_request_state(&binding, &sealed)
                .is_err()
        );
        let mut tampered = URL_SAFE_NO_PAD.decode(&sealed).unwrap();
        tampered[5] ^= 1;
        assert!(
            seal.open_request_state(&binding, &URL_SAFE_NO_PAD.encode(tampered))
                .is_err()
        );
        assert!(seal.open_request_state(&binding, "garbage").is_err());
    }

    #[test]
    fn a_sealed_state_expires_fifteen_minutes_after_it_was_sealed() {
        let seal = Seal::new(b"k");
        let args = json!({});
        let binding = Binding {
            target: "tool",
            principal: "",
            arguments: &args,
        };
        // Read from the system clock here, so a `now()` that ignores it cannot pass.
        let wall = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        let before = wall();
        let sealed = URL_SAFE_NO_PAD
            .decode(seal.request_state(&binding, None))
            .unwrap();
        let after = wall();
        let payload: Value = serde_json::from_slice(&sealed[..sealed.len() - TAG_LEN]).unwrap();
        let expiry = payload["e"].as_u64().unwrap();
        // A client that takes minutes to answer an elicitation must still be able to retry.
        assert!(
            (before + 15 * 60..=after + 15 * 60).contains(&expiry),
            "expiry {expiry} is not 15 minutes after {before}"
        );
    }

    /// Seals `payload` as `seal` would, so a test can choose the expiry.
    fn sealed_with(seal: &Seal, payload: Value) -> String {
        let payload = payload.to_string();
        let tag = seal.tag(REQUEST_STATE_DOMAIN, &[payload.as_bytes()]);
        let mut bytes = payload.into_bytes();
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn a_sealed_state_opens_through_its_expiry_second_and_not_after() {
        let seal = Seal::new(b"k");
        let args = json!({});
        let binding = Binding {
            target: "tool",
            principal: "",
            arguments: &args,
        };
        let b = digest(&binding);
        let past = sealed_with(&seal, json!({ "b": b, "e": now() - 1, "s": 1 }));
        let error = seal.open_request_state(&binding, &past).unwrap_err();
        assert!(error.message().contains("expired"), "{}", error.message());
        // Retried only when the clock ticks between sealing and opening.
        let opened_in_its_second = (0..5).any(|_| {
            let second = now();
            let due = sealed_with(&seal, json!({ "b": b, "e": second, "s": 1 }));
            let opened = seal.open_request_state(&binding, &due);
            if now() != second {
                return false;
            }
            assert_eq!(opened.unwrap(), Some(json!(1)));
            true
        });
        assert!(opened_in_its_second, "the clock never held still");
    }
}

#[cfg(test)]
mod validator_tests {
    use super::*;

    #[test]
    fn a_validator_opens_only_for_its_own_resource_and_key() {
        let seal = Seal::new(b"key-one");
        let validator = seal.validator("basket", "bsk_a", 7);
        assert_eq!(seal.open_validator("basket", "bsk_a", &validator), Some(7));
        assert_eq!(seal.open_validator("basket", "bsk_b", &validator), None);
        assert_eq!(seal.open_validator("order", "bsk_a", &validator), None);
        assert_eq!(
            Seal::new(b"key-two").open_validator("basket", "bsk_a", &validator),
            None
        );
        assert_eq!(
            seal.open_validator("basket", "bsk_a", &validator[..validator.len() - 2]),
            None
        );
        let mut forged = URL_SAFE_NO_PAD.decode(&validator).unwrap();
        forged[7] = 8;
        assert_eq!(
            seal.open_validator("basket", "bsk_a", &URL_SAFE_NO_PAD.encode(forged)),
            None
        );
        assert_eq!(
            seal.open_validator("basket", "bsk_a", "not base64 at all!"),
            None
        );
        assert_ne!(seal.validator("basket", "bsk_a", 8), validator);
    }

    /// The validator's bytes are a wire format: replicas of different releases behind one load
    /// balancer must mint and accept the same ones. The version, big-endian, then the first 16
    /// bytes of HMAC-SHA-256 over the domain, the kind, a zero byte, the handle, a zero byte and
    /// the version.
    #[test]
    fn a_validator_is_the_version_and_a_truncated_hmac_of_its_resource() {
        let key = b"a key the replicas share";
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
        mac.update(b"mcp-tools/validator\0basket\0bsk_a\0");
        mac.update(&7u64.to_be_bytes());
        let mut expected = 7u64.to_be_bytes().to_vec();
        expected.extend_from_slice(&mac.finalize().into_bytes()[..16]);
        let seal = Seal::new(key);
        for _ in 0..2 {
            // The keyed MAC is cloned for each tag, never consumed.
            assert_eq!(
                URL_SAFE_NO_PAD
                    .decode(seal.validator("basket", "bsk_a", 7))
                    .unwrap(),
                expected
            );
        }
    }
}

#[cfg(test)]
mod rotation_tests {
    use super::*;

    /// While keys roll, a task id a retry recomputes under the new key is not the one the call
    /// got under the old key: the old one is found among the earlier ids, until its time.
    #[test]
    fn a_task_id_made_under_an_accepted_key_is_found_until_its_time() {
        let old = Seal::new(b"old-key");
        let made = old.task_id("alice", "slow", "op-1");
        assert!(made.starts_with("tsk_") && made.len() == 4 + 32, "{made}");
        let rolled = Seal::rotating(b"new-key", vec![(b"old-key".to_vec(), now() + 3600)]);
        assert_ne!(rolled.task_id("alice", "slow", "op-1"), made);
        assert_eq!(
            rolled.earlier_task_ids("alice", "slow", "op-1"),
            vec![made.clone()]
        );
        assert_ne!(
            rolled.earlier_task_ids("alice", "slow", "op-2"),
            vec![made.clone()]
        );
        let lapsed = Seal::rotating(b"new-key", vec![(b"old-key".to_vec(), now() - 1)]);
        assert!(lapsed.earlier_task_ids("alice", "slow", "op-1").is_empty());
    }

    /// Every kind of sealed value opens under a key accepted until later, not once its time
    /// passed, and what the rotating seal signs opens under its own key only.
    #[test]
    fn an_accepted_key_verifies_until_its_time() {
        let old = Seal::new(b"old-key");
        let later = now() + 3600;
        let rolled = Seal::rotating(b"new-key", vec![(b"old-key".to_vec(), later)]);
        let lapsed = Seal::rotating(b"new-key", vec![(b"old-key".to_vec(), now() - 1)]);
        let binding = Binding {
            target: "tools/call:t",
            principal: "",
            arguments: &json!({}),
        };
        let cursor = old.cursor("tools", 3, 9);
        let state = old.request_state(&binding, Some(&json!({"n": 1})));
        let validator = old.validator("basket", "bsk_a", 4);
        assert_eq!(rolled.open_cursor("tools", &cursor, 9), Ok(3));
        assert_eq!(
            rolled.open_request_state(&binding, &state).unwrap(),
            Some(json!({"n": 1}))
        );
        assert_eq!(
            rolled.open_validator("basket", "bsk_a", &validator),
            Some(4)
        );
        assert_eq!(
            lapsed.open_cursor("tools", &cursor, 9),
            Err(CursorError::BadSignature)
        );
        assert!(lapsed.open_request_state(&binding, &state).is_err());
        assert_eq!(lapsed.open_validator("basket", "bsk_a", &validator), None);
        let signed_new = rolled.validator("basket", "bsk_a", 5);
        assert_eq!(old.open_validator("basket", "bsk_a", &signed_new), None);
        assert_eq!(
            Seal::new(b"new-key").open_validator("basket", "bsk_a", &signed_new),
            Some(5)
        );
    }
}
