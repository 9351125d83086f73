//! The boundary of a step over several resources, on the same transaction interface as a
//! single change: every check a change makes, made for each resource before anything is
//! written; the transition run once over all of them; every new version and one ledger record
//! written in the one unit.

use super::*;
use crate::store::step::{
    AppliedPart, AppliedStep, MovedPart, ReplayedStep, StaleStep, StepChanged, StepOutcome,
    StepRequest, StepTransition,
};

/// What a step answers, and whether the ledger records it.
enum StepDecision {
    Record(StepOutcome),
    Unrecorded(StepOutcome),
}

/// A step that names fewer than two resources, or one resource twice: refused before anything
/// is read, unrecorded.
fn malformed(request: &StepRequest) -> Option<Rejected> {
    let parts = &request.parts;
    let twice = parts.iter().enumerate().find(|(at, part)| {
        parts[..*at]
            .iter()
            .any(|earlier| earlier.handle == part.handle)
    });
    let message = match (parts.len(), twice) {
        (0 | 1, _) => {
            "a step changes two resources or more; change one with a single mutation".to_owned()
        }
        (_, Some((_, part))) => format!(
            "the step names {} twice: name each resource once",
            part.handle
        ),
        _ => return None,
    };
    Some(Rejected {
        code: code::INVALID_ARGUMENTS.to_owned(),
        message,
        recovery: None,
        details: None,
    })
}

/// The step boundary. The caller holds whatever makes `txn` atomic, over every resource the
/// request names.
pub(crate) fn step(
    txn: &mut impl Txn,
    config: &StoreConfig,
    request: &StepRequest,
    transition: &mut StepTransition,
    now: i64,
) -> Result<StepOutcome, StoreError> {
    if let Some(rejected) = malformed(request) {
        return Ok(StepOutcome::Rejected(rejected));
    }
    let principal = request.principal.key();
    let first = &request.parts[0];
    let operation = request.operation.as_ref();
    if has_prefix(&first.handle, first.kind.prefix) {
        let operation_id = operation.map(|(operation_id, _)| operation_id.as_str());
        txn.prefetch(&first.handle, principal, operation_id)?;
    }
    let mut stale = None;
    if let Some((operation_id, fingerprint)) = operation
        && let Some(entry) = txn.ledger_get(principal, operation_id)?
    {
        if entry.expires_at > now {
            return answer(txn, request, operation_id, fingerprint, entry, now);
        }
        stale = Some(entry);
    }
    let (outcome, recorded) = match decide(txn, config, request, transition, now)? {
        StepDecision::Record(outcome) => {
            let summary = outcome.recorded();
            (outcome, summary)
        }
        StepDecision::Unrecorded(outcome) => (outcome, None),
    };
    if let (Some(operation), Some(step)) = (operation, recorded) {
        record(
            txn,
            config,
            principal,
            operation,
            stale.as_ref(),
            &first.handle,
            RecordedOutcome::Step { step },
            now,
        )?;
    }
    Ok(outcome)
}

/// The answer a live ledger record gives a step with its operation id.
fn answer(
    txn: &mut impl Txn,
    request: &StepRequest,
    operation_id: &str,
    fingerprint: &Fingerprint,
    entry: LedgerEntry,
    now: i64,
) -> Result<StepOutcome, StoreError> {
    let principal = request.principal.key();
    let original = match entry.state {
        LedgerState::Done(RecordedOutcome::Step { step }) if entry.fingerprint == *fingerprint => {
            step
        }
        LedgerState::Pending { .. } if entry.fingerprint == *fingerprint => {
            return Ok(StepOutcome::Rejected(Rejected::operation_in_progress(
                operation_id,
            )));
        }
        // Another request's record: another payload, or a single change's.
        _ => {
            return Ok(StepOutcome::Rejected(Rejected::operation_id_reused(
                operation_id,
            )));
        }
    };
    let mut current = Vec::with_capacity(request.parts.len());
    for part in &request.parts {
        if let Some(snapshot) = current_view(txn, &part.kind, principal, &part.handle, now)? {
            current.push(snapshot);
        }
    }
    Ok(StepOutcome::Replayed(ReplayedStep {
        operation_id: operation_id.to_owned(),
        recorded_at: format_rfc3339(entry.recorded_at),
        original,
        current,
    }))
}

/// A refusal about one resource of a step: its handle in the details, so the caller knows
/// which one.
fn about(mut rejected: Rejected, handle: &str) -> Rejected {
    match &mut rejected.details {
        Some(Value::Object(details)) => {
            details.insert("handle".to_owned(), Value::from(handle));
        }
        _ => rejected.details = Some(serde_json::json!({ "handle": handle })),
    }
    rejected
}

fn decide(
    txn: &mut impl Txn,
    config: &StoreConfig,
    request: &StepRequest,
    transition: &mut StepTransition,
    now: i64,
) -> Result<StepDecision, StoreError> {
    let principal = request.principal.key();
    let parts = &request.parts;
    let mut records = Vec::with_capacity(parts.len());
    for part in parts {
        match resolve(txn, &part.kind, principal, &part.handle)? {
            Ok(record) => records.push(record),
            // Never recorded: a guessed handle must not cost the ledger anything.
            Err(rejected) => {
                return Ok(StepDecision::Unrecorded(StepOutcome::Rejected(about(
                    rejected,
                    &part.handle,
                ))));
            }
        }
    }
    let first = &parts[0];
    let full =
        request.operation.is_some() && txn.ledger_full(&first.handle, config.ledger_quota, now)?;
    let settled = |rejected: Rejected| {
        let outcome = StepOutcome::Rejected(rejected);
        if full {
            StepDecision::Unrecorded(outcome)
        } else {
            StepDecision::Record(outcome)
        }
    };
    for (part, record) in parts.iter().zip(&records) {
        if record.lifecycle == Lifecycle::Terminal {
            let rejected = Rejected::terminal(part.kind.kind, &part.handle);
            return Ok(settled(about(rejected, &part.handle)));
        }
        if let Some(at) = expired(record, now) {
            let rejected = Rejected::expired(part.kind.kind, &part.handle, &format_rfc3339(at));
            return Ok(settled(about(rejected, &part.handle)));
        }
    }
    if full {
        return Ok(StepDecision::Unrecorded(StepOutcome::Rejected(
            Rejected::ledger_full(first.kind.kind, &first.handle, config.ledger_quota),
        )));
    }
    let checked = !config.skips_version_checks();
    for (part, record) in parts.iter().zip(&records) {
        if let Some(expected) = part.expected_version
            && expected > record.version
            && checked
        {
            let rejected =
                Rejected::future_version(part.kind.kind, &part.handle, expected, record.version);
            return Ok(StepDecision::Record(StepOutcome::Rejected(about(
                rejected,
                &part.handle,
            ))));
        }
    }
    let mut moved = Vec::new();
    for (part, record) in parts.iter().zip(&records) {
        let Some(expected) = part.expected_version else {
            continue;
        };
        if expected == record.version || !checked {
            continue;
        }
        let before = state_at(txn, config, &part.handle, record, expected)?;
        let kind = &part.kind;
        // Between the views, so the delta never shows what the view hides.
        let Some((current_state, delta)) = entity_code(|| {
            let current_state = kind.view_shared(&record.state);
            let delta = before.map(|before| diff(&kind.view_of(&before), &current_state));
            (current_state, delta)
        }) else {
            return Ok(StepDecision::Unrecorded(StepOutcome::Rejected(
                Rejected::panicked(kind.kind),
            )));
        };
        moved.push(MovedPart {
            handle: part.handle.clone(),
            expected_version: expected,
            current_version: record.version,
            delta_available: delta.is_some(),
            delta: delta.unwrap_or_default(),
            current_state,
            resumption: resumption(&part.handle, record),
        });
    }
    if !moved.is_empty() {
        return Ok(StepDecision::Record(StepOutcome::StaleView(StaleStep {
            code: code::STALE_VIEW.to_owned(),
            recovery: Recovery::RefreshAndReplan,
            moved,
        })));
    }

    // The transition only borrows the stored states; items it asks for and was not handed
    // are fetched (for every resource in one round), and it runs again with them.
    let mut in_hand: Vec<InHand> = parts
        .iter()
        .map(|part| InHand::new(!part.kind.collections.is_empty()))
        .collect();
    let mut rounds = 0;
    let run = loop {
        let states: Vec<&Value> = records.iter().map(|record| &*record.state).collect();
        let run = panic::catch_unwind(AssertUnwindSafe(|| transition.run(&states, &in_hand)));
        let mut asked = false;
        for (part, hand) in parts.iter().zip(in_hand.iter_mut()) {
            let wanted = hand.take_misses();
            if wanted.is_empty() {
                continue;
            }
            asked = true;
            if rounds < MAX_ITEM_ROUNDS {
                let found = txn.items_get(&part.handle, &wanted)?;
                hand.add(&wanted, found);
            }
        }
        if !asked {
            break run;
        }
        rounds += 1;
        if rounds > MAX_ITEM_ROUNDS {
            return Ok(StepDecision::Unrecorded(StepOutcome::Rejected(
                Rejected::too_many_item_rounds(first.kind.kind, MAX_ITEM_ROUNDS),
            )));
        }
    };
    let changed = match run {
        Ok(Ok(changed)) => changed,
        Ok(Err(error)) if error.details().is_some_and(|d| deeper_than(d, MAX_DEPTH)) => {
            return Ok(StepDecision::Unrecorded(StepOutcome::Rejected(
                Rejected::too_deep(first.kind.kind),
            )));
        }
        Ok(Err(error)) => {
            return Ok(StepDecision::Record(StepOutcome::Rejected(
                Rejected::domain(&error),
            )));
        }
        // A bug, not an outcome: nothing is recorded, so a fixed server applies the retry.
        Err(_) => {
            return Ok(StepDecision::Unrecorded(StepOutcome::Rejected(
                Rejected::panicked(first.kind.kind),
            )));
        }
    };
    let StepChanged {
        states,
        items,
        result,
    } = changed;
    if states.len() != parts.len() || items.len() != parts.len() {
        return Err(StoreError::Backend(format!(
            "a step over {} resources made {} states",
            parts.len(),
            states.len()
        )));
    }
    if deeper_than(&result, MAX_DEPTH) || states.iter().any(|state| deeper_than(state, MAX_DEPTH)) {
        return Ok(StepDecision::Unrecorded(StepOutcome::Rejected(
            Rejected::too_deep(first.kind.kind),
        )));
    }
    // Every resource's next version is worked out before anything is written: a view or a
    // lifecycle that panics leaves every resource as it was.
    let mut writes = Vec::with_capacity(parts.len());
    for ((part, record), (state, items)) in
        parts.iter().zip(records).zip(states.into_iter().zip(items))
    {
        let kind = &part.kind;
        let state = Arc::new(state);
        let Some((lifecycle, view)) =
            entity_code(|| ((kind.lifecycle)(&state), kind.view_shared(&state)))
        else {
            return Ok(StepDecision::Unrecorded(StepOutcome::Rejected(
                Rejected::panicked(kind.kind),
            )));
        };
        writes.push((part, record, state, items, lifecycle, view));
    }
    let mut resources = Vec::with_capacity(writes.len());
    for (index, (part, mut record, state, items, lifecycle, view)) in writes.into_iter().enumerate()
    {
        let undo = undo_patch(&record.state, &state);
        record.version += 1;
        record.lifecycle = lifecycle;
        let expires_at = expiry(&part.kind, now);
        let expiry_moved = record.expires_at != expires_at;
        record.expires_at = expires_at;
        record.state = state;
        resources.push(AppliedPart {
            handle: part.handle.clone(),
            version: record.version,
            state: view,
            resumption: resumption(&part.handle, &record),
        });
        let drop_through = record
            .version
            .saturating_sub(config.history_limit.max(1) - 1);
        let change = Change {
            undo,
            drop_through,
            // The ledger record counts against the first resource.
            recorded: index == 0 && request.operation.is_some(),
            expiry_moved,
            items,
            collections: !part.kind.collections.is_empty(),
            effects: Vec::new(),
        };
        txn.write(&part.handle, record, change)?;
    }
    Ok(StepDecision::Record(StepOutcome::Applied(AppliedStep {
        resources,
        result,
    })))
}
