//! Minting of opaque resource handles.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::store::error::StoreError;

/// Random bytes in every handle: 160 bits, comfortably above the 128-bit floor.
const HANDLE_ENTROPY_BYTES: usize = 20;

/// Mints a handle `<prefix>_<base64url of 160 random bits>` from the operating system's CSPRNG.
///
/// The handle carries no information besides its prefix; the store binds it to the principal that
/// created it. Without authentication every caller is the anonymous principal, and a handle is then a
/// bearer capability: whoever holds it can use it.
pub fn mint_handle(prefix: &str) -> Result<String, StoreError> {
    let bytes: [u8; HANDLE_ENTROPY_BYTES] = random()?;
    Ok(format!("{prefix}_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// `N` bytes from the operating system's CSPRNG.
pub(crate) fn random<const N: usize>() -> Result<[u8; N], StoreError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|error| {
        StoreError::Backend(format!("the system random source failed: {error}"))
    })?;
    Ok(bytes)
}

/// Whether `handle` has the shape `mint_handle(prefix)` produces; a cheap filter before any lookup.
pub(crate) fn has_prefix(handle: &str, prefix: &str) -> bool {
    handle
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|random| !random.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn handles_are_prefixed_long_and_distinct() {
        let minted: HashSet<String> = (0..1000).map(|_| mint_handle("bsk").unwrap()).collect();
        assert_eq!(minted.len(), 1000);
        for handle in &minted {
            assert!(has_prefix(handle, "bsk"), "{handle}");
            let random = handle.strip_prefix("bsk_").unwrap();
            assert_eq!(URL_SAFE_NO_PAD.decode(random).unwrap().len(), 20);
        }
        assert!(!has_prefix("bsk_", "bsk"));
        assert!(!has_prefix("bskx_abc", "bsk"));
    }
}
