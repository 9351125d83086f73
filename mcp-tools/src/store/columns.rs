//! How the SQL stores write the boundary's values into columns and read them back: versions as
//! signed 64-bit integers, states, patches and outcomes as JSON text, a ledger record's state as
//! its outcome or its claim.

use super::boundary::LedgerState;
use crate::store::error::StoreError;

/// Versions between two deletions of a resource's undo patches beyond the history limit: the
/// SQL stores delete them in batches, not on every write.
pub(crate) const HISTORY_SWEEP_EVERY: u64 = 16;

/// The versions whose patches a write drops now, given the boundary's `drop_through`; 0 for
/// none.
pub(crate) fn history_to_drop(drop_through: u64) -> u64 {
    if drop_through > 0 && drop_through.is_multiple_of(HISTORY_SWEEP_EVERY) {
        drop_through
    } else {
        0
    }
}

pub(crate) fn version_to_sql(version: u64) -> Result<i64, StoreError> {
    i64::try_from(version)
        .map_err(|_| StoreError::Corrupt(format!("version {version} out of range")))
}

pub(crate) fn version_from_sql(version: i64) -> Result<u64, StoreError> {
    u64::try_from(version).map_err(|_| StoreError::Corrupt(format!("negative version {version}")))
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|error| StoreError::Corrupt(format!("{what}: {error}")))
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Corrupt(format!("{what}: {error}")))
}

/// A ledger record's state as its columns hold it: the outcome's JSON, or a create's claim token
/// (stored as its bits: SQL integers are signed).
pub(crate) fn ledger_state_to_sql(
    state: &LedgerState,
) -> Result<(Option<String>, Option<i64>), StoreError> {
    Ok(match state {
        LedgerState::Done(outcome) => (Some(to_json(outcome, "ledger outcome")?), None),
        LedgerState::Pending { token } => (None, Some(*token as i64)),
    })
}

/// The inverse of [`ledger_state_to_sql`].
pub(crate) fn ledger_state_from_sql(
    outcome: Option<&str>,
    claim: Option<i64>,
) -> Result<LedgerState, StoreError> {
    match (outcome, claim) {
        (Some(outcome), _) => Ok(LedgerState::Done(json(outcome, "ledger outcome")?)),
        (None, Some(token)) => Ok(LedgerState::Pending {
            token: token as u64,
        }),
        (None, None) => Err(StoreError::Corrupt(
            "a ledger row with neither outcome nor claim".into(),
        )),
    }
}
