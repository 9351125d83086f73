//! What a request operates on, as far as scopes are concerned, and whether the caller may.

use std::borrow::Cow;

use http::HeaderMap;
use serde_json::{Map, Value};

use super::{McpServer, Snapshot};
use crate::auth::oauth::ResourceServer;
use crate::auth::scope::{Granted, Required};
use crate::protocol::error::RpcError;
use crate::protocol::headers;

impl McpServer {
    /// What the caller may see and use, when the server checks scopes (it is an OAuth resource
    /// server) and the caller carries a grant; `None` means everything.
    pub(crate) fn access<'a>(&'a self, granted: Option<&'a Granted>) -> Option<Access<'a>> {
        Some(Access {
            oauth: self.shared.oauth.as_deref()?,
            granted: granted?,
        })
    }
}

/// An item that can require scopes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// A tool, by its position in the catalog.
    Tool(usize),
    Prompt(&'a str),
    /// A resource URI, read through a listed resource or a template.
    Resource(&'a str),
    /// A resource template, by its URI template (a completion's `ref/resource`).
    Template(&'a str),
}

impl<'a> Target<'a> {
    /// The method and target name the routing headers give (`Mcp-Name` decoded from its
    /// Base64 form), so scopes can be checked before the body is read. The body is checked
    /// against the headers later, and judged again then; unreadable headers are left to that.
    pub(crate) fn named_by(headers: &HeaderMap) -> Option<(&str, Cow<'_, str>)> {
        let method = headers
            .get(&headers::METHOD_HEADER_NAME)?
            .to_str()
            .ok()?
            .trim();
        let name = headers::header_text(headers, &headers::NAME_HEADER_NAME).ok()??;
        Some((method, name))
    }

    /// What `method` operates on when its target is `name`.
    pub(crate) fn of(method: &str, name: &'a str, snapshot: &Snapshot) -> Option<Self> {
        match method {
            "tools/call" => snapshot.catalog.position(name).map(Target::Tool),
            "prompts/get" => Some(Target::Prompt(name)),
            "resources/read" => Some(Target::Resource(name)),
            _ => None,
        }
    }

    /// What a `completion/complete` completes: a prompt's or a template's arguments.
    pub(crate) fn of_completion(params: &'a Map<String, Value>) -> Option<Self> {
        let reference = params.get("ref")?.as_object()?;
        match reference.get("type")?.as_str()? {
            "ref/prompt" => reference
                .get("name")
                .and_then(Value::as_str)
                .map(Target::Prompt),
            "ref/resource" => reference
                .get("uri")
                .and_then(Value::as_str)
                .map(Target::Template),
            _ => None,
        }
    }

    /// The item's own scopes, when it exists.
    fn own<'s>(&self, snapshot: &'s Snapshot) -> Option<&'s Required> {
        match *self {
            Target::Tool(position) => {
                Some(&snapshot.catalog.tools.get(position)?.definition.scopes)
            }
            Target::Prompt(name) => snapshot.offer.prompts.get(name).map(|p| &p.scopes),
            Target::Resource(uri) => snapshot.offer.resources.scopes_for(uri),
            Target::Template(template) => snapshot
                .offer
                .resources
                .templates
                .iter()
                .find(|t| t.descriptor.get("uriTemplate").and_then(Value::as_str) == Some(template))
                .map(|t| &t.scopes),
        }
    }

    /// How a refusal names the item: only built when one is answered.
    fn describe(&self, snapshot: &Snapshot) -> String {
        match *self {
            Target::Tool(position) => match snapshot.catalog.tools.get(position) {
                Some(tool) => format!("The tool {}", tool.definition.name),
                None => "The tool".to_owned(),
            },
            Target::Prompt(name) => format!("The prompt {name}"),
            Target::Resource(uri) => format!("Reading {uri}"),
            Target::Template(template) => format!("The resource template {template}"),
        }
    }

    /// What the item requires (its own scopes or the server's default ones), when it exists.
    pub(crate) fn requirement<'s>(
        &self,
        oauth: &'s ResourceServer,
        snapshot: &'s Snapshot,
    ) -> Option<&'s Required> {
        self.own(snapshot).map(|own| oauth.requirement(own))
    }
}

/// What the caller's token grants, on a server that checks scopes: every decision about what a
/// caller may see or use goes through it.
#[derive(Clone, Copy)]
pub(crate) struct Access<'a> {
    pub(crate) oauth: &'a ResourceServer,
    pub(crate) granted: &'a Granted,
}

impl Access<'_> {
    /// Whether the caller may learn of a change to the resource `uri`: what its resource or
    /// template requires, or the server's default scopes for a URI neither names (an update
    /// about a sub-resource the server never listed is not open to everyone).
    pub(crate) fn may_learn_of(&self, uri: &str, snapshot: &Snapshot) -> bool {
        let target = Target::Resource(uri);
        let required = target
            .requirement(self.oauth, snapshot)
            .unwrap_or_else(|| self.oauth.requirement(Required::none()));
        self.granted.satisfies(required)
    }

    /// Refuses with HTTP 403 when the token lacks a scope `target` requires. An item that does
    /// not exist is left to the method, which answers it as unknown.
    pub(crate) fn check(&self, target: Target<'_>, snapshot: &Snapshot) -> Result<(), RpcError> {
        self.check_requirement(target, target.requirement(self.oauth, snapshot), snapshot)
    }

    /// [`check`](Self::check) with the requirement already looked up.
    pub(crate) fn check_requirement(
        &self,
        target: Target<'_>,
        required: Option<&Required>,
        snapshot: &Snapshot,
    ) -> Result<(), RpcError> {
        match required {
            Some(required) if !self.granted.satisfies(required) => Err(self
                .oauth
                .insufficient_scope(required, &target.describe(snapshot))),
            _ => Ok(()),
        }
    }
}
