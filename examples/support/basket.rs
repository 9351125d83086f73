//! The basket of the lost-update story: a laptop configuration several agents share by handle.
//! Shared by `examples/basket.rs`, `examples/lost_update_demo.rs` and the end-to-end tests.
#![allow(dead_code)]

use mcp_tools::IntoToolError;
use mcp_tools::effects::{Delivery, Effect, EffectError, Effects};
use mcp_tools::store::{Collection, Entity, Lifecycle};
use mcp_tools::tools::ToolSet;
use mcp_tools::{ToolError, tool, tools};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A laptop configuration being put together, then checked out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(
    kind = "basket",
    prefix = "bsk",
    ttl_secs = 86400,
    lifecycle = lifecycle,
    view = summary
)]
pub struct Basket {
    /// The laptop model.
    pub model: String,
    /// Memory, in GiB.
    pub memory_gib: u32,
    /// Storage, in GiB.
    pub storage_gib: u32,
    /// Free-form notes, in the order they were added, each stored on its own: adding one costs
    /// the same however many there are.
    pub notes: Collection<String>,
    /// Whether the basket was checked out (then it accepts no further change).
    pub checked_out: bool,
}

impl Basket {
    fn lifecycle(&self) -> Lifecycle {
        if self.checked_out {
            Lifecycle::Terminal
        } else {
            Lifecycle::Active
        }
    }

    /// What outcomes show: notes pile up, so a model sees their count, not all of them;
    /// `basket_get` returns the basket with a page of its notes.
    pub fn summary(&self) -> BasketView<'_> {
        BasketView {
            model: &self.model,
            memory_gib: self.memory_gib,
            storage_gib: self.storage_gib,
            note_count: self.notes.len(),
            checked_out: self.checked_out,
        }
    }
}

/// A basket as outcomes show it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BasketView<'a> {
    /// The laptop model.
    pub model: &'a str,
    /// Memory, in GiB.
    pub memory_gib: u32,
    /// Storage, in GiB.
    pub storage_gib: u32,
    /// How many notes the basket has.
    pub note_count: u64,
    /// Whether the basket was checked out.
    pub checked_out: bool,
}

/// The largest memory or storage size a basket accepts, in GiB.
pub const MAX_GIB: u32 = 1 << 20;

/// Why a basket refuses a change. Each code is published, with its hint, in the output schema
/// and the docs of the tools that return it.
#[derive(Debug, IntoToolError)]
pub enum BasketError {
    /// The size asked for is not larger than the current one: read the basket and choose a
    /// larger size, or leave it as it is.
    #[code = "NOT_AN_UPGRADE"]
    #[recovery = "refresh_and_replan"]
    NotAnUpgrade {
        /// `memory` or `storage`.
        what: &'static str,
        /// The current size, in GiB.
        current: u32,
    },
    /// The size is outside what a basket accepts (1 GiB to 1 PiB): send a size in range.
    #[code = "INVALID_SIZE"]
    #[recovery(custom = "fix_the_arguments")]
    InvalidSize {
        /// The argument.
        what: &'static str,
        /// The size sent, in GiB.
        gib: u32,
    },
    /// The basket has no note with this id (it was never added, or was removed): read the
    /// basket for the notes it has.
    #[code = "NO_SUCH_NOTE"]
    #[recovery = "refresh_and_replan"]
    NoSuchNote {
        /// The note id sent.
        note_id: u64,
    },
}

impl std::fmt::Display for BasketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BasketError::NotAnUpgrade { what, current } => write!(
                f,
                "{what} is already {current} GiB; an upgrade must be larger"
            ),
            BasketError::InvalidSize { what, gib } => {
                write!(f, "{what} must be between 1 and {MAX_GIB} GiB, not {gib}")
            }
            BasketError::NoSuchNote { note_id } => {
                write!(f, "the basket has no note {note_id}")
            }
        }
    }
}

fn check_size(what: &'static str, gib: u32) -> Result<(), BasketError> {
    if gib == 0 || gib > MAX_GIB {
        return Err(BasketError::InvalidSize { what, gib });
    }
    Ok(())
}

/// Creates a basket holding one laptop with 16 GiB of memory and 512 GiB of storage.
///
/// Returns the basket's handle (`basket_id`) and version 1: keep both, later calls need them.
#[tool(creates = Basket, scopes = ["basket:write"])]
pub fn basket_create(
    /// The laptop model (default "Laptop 14").
    model: Option<String>,
) -> Basket {
    Basket {
        model: model.unwrap_or_else(|| "Laptop 14".to_owned()),
        memory_gib: 16,
        storage_gib: 512,
        notes: Collection::new(),
        checked_out: false,
    }
}

/// Reads a basket: its configuration, a page of its notes (`notes.items`, with
/// `notes.next_cursor` for the next page), its current version and the resumption record to
/// pass on.
#[tool(reads = Basket, scopes = ["basket:read"])]
pub fn basket_get(basket: &Basket) -> Basket {
    basket.clone()
}

/// Sets the memory of the laptop in a basket. Only the memory changes.
///
/// Fails with `NOT_AN_UPGRADE` when the size is not larger than the current one.
#[tool(mutates = Basket, scopes = ["basket:write"])]
pub fn basket_upgrade_memory(
    basket: &mut Basket,
    /// The new memory size in GiB, larger than the current one.
    memory_gib: u32,
) -> Result<u32, BasketError> {
    check_size("memory_gib", memory_gib)?;
    if memory_gib <= basket.memory_gib {
        return Err(BasketError::NotAnUpgrade {
            what: "memory",
            current: basket.memory_gib,
        });
    }
    basket.memory_gib = memory_gib;
    Ok(memory_gib)
}

/// Sets the storage of the laptop in a basket. Only the storage changes, so a change to other
/// fields since your read does not block it: it is re-applied on the current version
/// (`rebased_from` in the result).
#[tool(mutates = Basket, on_conflict = rebase, touches = [storage_gib], scopes = ["basket:write"])]
pub fn basket_upgrade_storage(
    basket: &mut Basket,
    /// The new storage size in GiB, larger than the current one.
    storage_gib: u32,
) -> Result<u32, BasketError> {
    check_size("storage_gib", storage_gib)?;
    if storage_gib <= basket.storage_gib {
        return Err(BasketError::NotAnUpgrade {
            what: "storage",
            current: basket.storage_gib,
        });
    }
    basket.storage_gib = storage_gib;
    Ok(storage_gib)
}

/// Replaces the whole configuration (memory and storage) with the values given.
///
/// Every value you send overwrites the current one, so the change is refused (`stale_view`)
/// whenever the basket changed after the version you planned from.
#[tool(mutates = Basket, scopes = ["basket:write"])]
pub fn basket_replace_configuration(
    basket: &mut Basket,
    /// Memory, in GiB.
    memory_gib: u32,
    /// Storage, in GiB.
    storage_gib: u32,
) -> Result<Basket, BasketError> {
    check_size("memory_gib", memory_gib)?;
    check_size("storage_gib", storage_gib)?;
    basket.memory_gib = memory_gib;
    basket.storage_gib = storage_gib;
    Ok(basket.clone())
}

/// What a checkout confirms.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Receipt {
    /// The configuration that was ordered.
    pub ordered: String,
    /// The price charged, in euros.
    pub price_eur: u32,
}

/// The price of a basket's configuration, in euros.
pub fn price_eur(basket: &Basket) -> u32 {
    900 + basket.memory_gib.saturating_mul(6) + basket.storage_gib / 4
}

fn configuration(basket: &Basket) -> String {
    format!(
        "{} with {} GiB memory and {} GiB storage",
        basket.model, basket.memory_gib, basket.storage_gib
    )
}

/// A charge of the customer's card for a checked-out basket, made by the payment service once
/// the checkout is committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Charge {
    /// The amount, in euros.
    pub amount_eur: u32,
    /// What is paid for.
    pub description: String,
}

impl Effect for Charge {
    const KIND: &'static str = "charge";
}

/// Checks the basket out: orders exactly the configuration at `expected_version`, and charges
/// its price once the order is recorded (the charge's delivery shows in `basket_get`).
///
/// Consequential: if the basket changed since, nothing is ordered or charged and the result
/// asks you to confirm the current configuration first (`recovery: reconfirm`). Afterwards the
/// basket is terminal and accepts no change.
#[tool(mutates = Basket, on_conflict = reconfirm, terminal, scopes = ["basket:write"])]
pub fn basket_checkout(basket: &mut Basket, payment: &mut Effects<Charge>) -> Receipt {
    basket.checked_out = true;
    let ordered = configuration(basket);
    let price_eur = price_eur(basket);
    payment.emit(Charge {
        amount_eur: price_eur,
        description: ordered.clone(),
    });
    Receipt { ordered, price_eur }
}

/// Charges a checkout through the payment service at `BASKET_PAYMENT_URL` (a JSON `POST` with
/// the effect's key as its `Idempotency-Key` header, so a repeated delivery is not a second
/// charge); without it, the charge is only logged. A 2xx answer is the charge's result; a 4xx
/// other than 408 and 429 refuses it for good; anything else is retried.
pub async fn charge_card(delivery: Delivery<Charge>) -> Result<serde_json::Value, EffectError> {
    let charge = delivery.effect();
    let Ok(url) = std::env::var("BASKET_PAYMENT_URL") else {
        tracing::info!(
            key = delivery.idempotency_key(),
            amount_eur = charge.amount_eur,
            "no payment service (BASKET_PAYMENT_URL): the charge is only logged"
        );
        return Ok(serde_json::json!({ "logged": true, "amount_eur": charge.amount_eur }));
    };
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(reqwest::Client::new);
    let body = serde_json::json!({
        "basket_id": delivery.handle(),
        "amount_eur": charge.amount_eur,
        "description": charge.description,
    });
    let response = client
        .post(&url)
        .header("Idempotency-Key", delivery.idempotency_key())
        .json(&body)
        .send()
        .await
        .map_err(|error| EffectError::retry(format!("the payment service: {error}")))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|error| EffectError::retry(format!("the payment service's answer: {error}")))?;
    if status.is_success() {
        return Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)));
    }
    let message = format!("the payment service answered {status}: {text}");
    if status.is_client_error() && status.as_u16() != 408 && status.as_u16() != 429 {
        return Err(EffectError::permanent(message));
    }
    Err(EffectError::retry(message))
}

/// What adding a note did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct NoteAdded {
    /// The new note's id, to edit or remove it.
    pub note_id: u64,
    /// How many notes the basket has now.
    pub note_count: u64,
}

/// Appends a note to a basket. Notes commute, so no `expected_version` is needed; send an
/// `operation_id` so a retry does not add the note twice.
#[tool(mutates = Basket, expected_version = false, scopes = ["basket:write"])]
pub fn basket_add_note(
    basket: &mut Basket,
    /// The note.
    text: String,
) -> NoteAdded {
    let note_id = basket.notes.push(text);
    NoteAdded {
        note_id,
        note_count: basket.notes.len(),
    }
}

/// Rewrites one note. Versioned per note: refused (`stale_view`) only when that note changed
/// after `expected_version`; changes to the rest of the basket do not block it.
#[tool(mutates = Basket, on_conflict = items, scopes = ["basket:write"])]
pub fn basket_edit_note(
    basket: &mut Basket,
    /// The note's id (`notes.items[].id` in `basket_get`).
    note_id: u64,
    /// The note's new text.
    text: String,
) -> Result<String, BasketError> {
    let note = basket
        .notes
        .get_mut(note_id)
        .ok_or(BasketError::NoSuchNote { note_id })?;
    *note = text;
    Ok(note.clone())
}

/// Removes one note. Versioned per note: refused (`stale_view`) only when that note changed
/// after `expected_version`.
#[tool(mutates = Basket, on_conflict = items, scopes = ["basket:write"])]
pub fn basket_remove_note(
    basket: &mut Basket,
    /// The note's id (`notes.items[].id` in `basket_get`).
    note_id: u64,
) -> Result<u64, BasketError> {
    basket
        .notes
        .remove(note_id)
        .ok_or(BasketError::NoSuchNote { note_id })?;
    Ok(basket.notes.len())
}

/// What moving a note did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct NoteMoved {
    /// The note's id in the basket it moved to.
    pub note_id: u64,
    /// How many notes the basket it left has now.
    pub from_note_count: u64,
    /// How many notes the basket it joined has now.
    pub to_note_count: u64,
}

/// Moves a note from one basket to another, both at once: the note leaves the first basket and
/// joins the second in one step, or neither changes. Send the version of each basket you
/// planned from; if either changed since, nothing moves and the result (`stale_view`) names
/// each basket that moved, with what changed.
#[tool(step, scopes = ["basket:write"])]
pub fn basket_move_note(
    from_basket: &mut Basket,
    to_basket: &mut Basket,
    /// The note's id in the basket it leaves (`notes.items[].id` in `basket_get`).
    note_id: u64,
) -> Result<NoteMoved, BasketError> {
    let text = from_basket
        .notes
        .remove(note_id)
        .ok_or(BasketError::NoSuchNote { note_id })?;
    let moved = to_basket.notes.push(text);
    Ok(NoteMoved {
        note_id: moved,
        from_note_count: from_basket.notes.len(),
        to_note_count: to_basket.notes.len(),
    })
}

/// A price for a basket's configuration.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Quote {
    /// The configuration priced.
    pub configuration: String,
    /// The price, in euros.
    pub price_eur: u32,
    /// Whether the user accepted the price (always `true` unless `confirm` asked them).
    pub accepted: bool,
}

/// Prices the laptop in a basket, which takes a while (`seconds`, default 3): a client that
/// takes tasks gets a task id at once and polls it. With `confirm`, the user is asked to accept
/// the price before the quote is final.
#[tool(reads = Basket, task = optional, scopes = ["basket:read"])]
pub async fn basket_quote(
    basket: &Basket,
    /// How long pricing takes, in seconds (default 3, at most 600).
    seconds: Option<f64>,
    /// Ask the user to accept the price.
    confirm: Option<bool>,
    cx: &mcp_tools::Context,
) -> Result<Quote, ToolError> {
    let seconds = seconds.unwrap_or(3.0).clamp(0.0, 600.0);
    let configuration = configuration(basket);
    let price_eur = price_eur(basket);
    // Pricing runs in four steps, each reported to a client that asked for progress. A
    // zero-length sleep still waits for the timer's next tick (a millisecond): none is taken.
    if seconds > 0.0 {
        for step in 1..=4u32 {
            tokio::time::sleep(std::time::Duration::from_secs_f64(seconds / 4.0)).await;
            cx.progress(f64::from(step), Some(4.0), Some("pricing"));
        }
    }
    let mut accepted = true;
    if confirm == Some(true) {
        let schema = serde_json::json!({ "type": "object",
            "properties": { "accept": { "type": "boolean" } }, "required": ["accept"] });
        let answers = cx
            .ask(mcp_tools::tools::InputRequired::new().elicit(
                "accept",
                format!("{configuration} costs {price_eur} EUR. Accept?"),
                schema,
            ))
            .await?;
        accepted = answers["accept"]["action"] == "accept"
            && answers["accept"]["content"]["accept"] == true;
    }
    Ok(Quote {
        configuration,
        price_eur,
        accepted,
    })
}

/// The basket tools, in `tools/list` order.
pub fn tool_set() -> ToolSet {
    tools![
        basket_create,
        basket_get,
        basket_upgrade_memory,
        basket_upgrade_storage,
        basket_replace_configuration,
        basket_checkout,
        basket_add_note,
        basket_edit_note,
        basket_remove_note,
        basket_move_note,
    ]
    .effect_handler(charge_card)
}

/// The basket tools and `basket_quote`, which runs as a task: what the basket server offers.
pub fn tool_set_with_quote() -> ToolSet {
    tool_set().merge(tools![basket_quote])
}
