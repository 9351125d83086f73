//! Argument completion (`completion/complete`) for prompt arguments and template variables.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::context::Context;

/// What a completion is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CompletionTarget {
    /// An argument of the named prompt.
    Prompt(String),
    /// A variable of the resource template with this URI template.
    ResourceTemplate(String),
}

type Complete = Arc<dyn Fn(&str, &Value, &Context) -> Vec<String> + Send + Sync>;

/// Completers keyed by target and argument name.
#[derive(Clone, Default)]
pub struct Completions {
    entries: Vec<(CompletionTarget, String, Complete)>,
}

/// The most values one completion returns, as the protocol caps it.
const MAX_VALUES: usize = 100;

impl Completions {
    /// No completers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Completes `argument` of `target`: `complete(partial_value, context_arguments, cx)` returns
    /// candidates (at most 100 are sent).
    pub fn with<F>(
        mut self,
        target: CompletionTarget,
        argument: impl Into<String>,
        complete: F,
    ) -> Self
    where
        F: Fn(&str, &Value, &Context) -> Vec<String> + Send + Sync + 'static,
    {
        self.entries
            .push((target, argument.into(), Arc::new(complete)));
        self
    }

    /// Whether any completer is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `completion` member of the result; no completer gives no values.
    pub(crate) fn complete(
        &self,
        target: &CompletionTarget,
        argument: &str,
        value: &str,
        context: &Value,
        cx: &Context,
    ) -> Value {
        let values = self
            .entries
            .iter()
            .find(|(t, a, _)| t == target && a == argument)
            .map(|(_, _, complete)| complete(value, context, cx))
            .unwrap_or_default();
        let total = values.len();
        let shown: Vec<String> = values.into_iter().take(MAX_VALUES).collect();
        json!({ "values": shown, "total": total, "hasMore": total > MAX_VALUES })
    }
}
