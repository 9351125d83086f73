//! Changing what the server offers while it serves, and telling the listeners.

use std::sync::Arc;

use super::{BuildError, McpServer, Offer};
use crate::prompts::Prompt;
use crate::resources::Resource;
use crate::tools::Tool;
use crate::tools::set::ToolSet;

/// Which list changed, for `subscriptions/listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Tools,
    Prompts,
    Resources,
    ResourceUpdated,
}

impl McpServer {
    /// Applies `apply` to a copy of the offer; when it reports a change, publishes the new
    /// snapshot and tells listeners. An edit that changed nothing notifies nobody.
    pub(crate) fn edit(
        &self,
        change: Change,
        apply: impl FnOnce(&mut Offer) -> bool,
    ) -> Result<bool, BuildError> {
        let _guard = self.shared.edit.lock().unwrap_or_else(|e| e.into_inner());
        let mut offer = self.shared.snapshot.load().offer.clone();
        if !apply(&mut offer) {
            return Ok(false);
        }
        let snapshot = self.shared.base.snapshot(offer)?;
        self.shared.snapshot.store(Arc::new(snapshot));
        let _ = self.shared.changes.send((change, None));
        Ok(true)
    }

    /// Adds (or replaces) a tool while serving; open `subscriptions/listen` streams that asked
    /// for tool changes are told.
    pub fn add_tool<T: Tool>(&self, tool: T) -> Result<(), BuildError> {
        if tool.entity_kind().is_some() && self.shared.store.is_none() {
            return Err(BuildError::MissingStore(vec![tool.info().name.to_string()]));
        }
        for effect in tool.effect_kinds() {
            match (&self.shared.effects, tool.entity_kind()) {
                (Some(effects), Some(entity)) if effects.handles(effect) => effects.report(entity),
                _ => {
                    return Err(BuildError::MissingEffectHandler {
                        tool: tool.info().name.to_string(),
                        effect: (*effect).to_owned(),
                    });
                }
            }
        }
        let addition = ToolSet::new().with(tool);
        self.edit(Change::Tools, move |offer| {
            for name in addition.names() {
                offer.tools.remove(&name);
            }
            offer.tools = std::mem::take(&mut offer.tools).merge(addition);
            true
        })
        .map(drop)
    }

    /// Removes a tool while serving; whether it existed.
    pub fn remove_tool(&self, name: &str) -> bool {
        self.remove(Change::Tools, |offer| offer.tools.remove(name))
    }

    /// Applies a removal; whether it removed anything.
    fn remove(&self, change: Change, removal: impl FnOnce(&mut Offer) -> bool) -> bool {
        // Removing never makes the offer invalid, so the edit cannot fail.
        self.edit(change, removal).unwrap_or(false)
    }

    /// Adds (or replaces) a prompt while serving.
    pub fn add_prompt(&self, prompt: Prompt) {
        let _ = self.edit(Change::Prompts, |offer| {
            offer.prompts.prompts.retain(|p| p.name != prompt.name);
            offer.prompts = std::mem::take(&mut offer.prompts).with(prompt);
            true
        });
    }

    /// Removes a prompt while serving; whether it existed.
    pub fn remove_prompt(&self, name: &str) -> bool {
        self.remove(Change::Prompts, |offer| {
            let before = offer.prompts.prompts.len();
            offer.prompts.prompts.retain(|p| p.name != name);
            offer.prompts.prompts.len() != before
        })
    }

    /// Adds (or replaces) a resource while serving.
    pub fn add_resource(&self, resource: Resource) {
        let _ = self.edit(Change::Resources, |offer| {
            offer.resources.resources.retain(|r| r.uri != resource.uri);
            offer.resources = std::mem::take(&mut offer.resources).with(resource);
            true
        });
    }

    /// Removes a resource while serving; whether it existed.
    pub fn remove_resource(&self, uri: &str) -> bool {
        self.remove(Change::Resources, |offer| {
            let before = offer.resources.resources.len();
            offer.resources.resources.retain(|r| r.uri != uri);
            offer.resources.resources.len() != before
        })
    }

    /// Tells listeners that the tool list changed (for tools whose availability depends on
    /// something outside the server).
    pub fn notify_tools_changed(&self) {
        let _ = self.shared.changes.send((Change::Tools, None));
    }

    /// Tells listeners that the prompt list changed.
    pub fn notify_prompts_changed(&self) {
        let _ = self.shared.changes.send((Change::Prompts, None));
    }

    /// Tells listeners that the resource list changed.
    pub fn notify_resources_changed(&self) {
        let _ = self.shared.changes.send((Change::Resources, None));
    }

    /// Tells listeners subscribed to `uri` (or a parent of it) that its contents changed.
    pub fn notify_resource_updated(&self, uri: &str) {
        let _ = self
            .shared
            .changes
            .send((Change::ResourceUpdated, Some(uri.to_owned())));
    }

    /// Ends open `subscriptions/listen` streams gracefully (each gets its final result), and
    /// ends the tasks running here as `failed` (see [`tasks`](crate::tasks)). Called by
    /// [`serve`](McpServer::serve) on shutdown.
    pub fn close_subscriptions(&self) {
        self.shared.shutdown.send_replace(true);
    }
}
