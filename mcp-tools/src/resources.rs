//! Resources: listed URIs and URI templates the client can read.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::auth::scope::Required;
use crate::context::Context;
use crate::protocol::error::RpcError;
use crate::tools::BoxFuture;

/// The contents of one resource (or sub-resource) as `resources/read` returns them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    /// The URI these contents belong to.
    pub uri: String,
    /// Media type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text, for textual contents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Base64 data, for binary contents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl ResourceContents {
    /// Textual contents.
    pub fn text(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        ResourceContents {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            text: Some(text.into()),
            blob: None,
        }
    }

    /// Binary contents, base64-encoded on the wire.
    pub fn blob(uri: impl Into<String>, mime_type: impl Into<String>, bytes: &[u8]) -> Self {
        ResourceContents {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            text: None,
            blob: Some(STANDARD.encode(bytes)),
        }
    }
}

type Reader = Arc<
    dyn Fn(
            String,
            Map<String, Value>,
            Context,
        ) -> BoxFuture<'static, Result<Vec<ResourceContents>, RpcError>>
        + Send
        + Sync,
>;

/// A listed resource with a fixed URI.
#[derive(Clone)]
pub struct Resource {
    pub(crate) descriptor: Map<String, Value>,
    pub(crate) uri: String,
    pub(crate) reader: Reader,
    pub(crate) scopes: Required,
}

fn descriptor(key: &str, value: &str, name: &str) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert(key.into(), Value::String(value.to_owned()));
    map.insert("name".into(), Value::String(name.to_owned()));
    map
}

impl Resource {
    /// A resource whose contents `read` produces on each read.
    pub fn new<F, Fut>(uri: impl Into<String>, name: impl Into<String>, read: F) -> Self
    where
        F: Fn(Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, RpcError>> + Send + 'static,
    {
        let uri = uri.into();
        let read = Arc::new(read);
        Resource {
            descriptor: descriptor("uri", &uri, &name.into()),
            uri,
            reader: Arc::new(move |_uri, _vars, cx| Box::pin(read(cx))),
            scopes: Required::default(),
        }
    }

    /// Requires these OAuth scopes (all of them) to see and read the resource; enforced when
    /// the server is an OAuth resource server.
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        self.scopes = self.scopes.and(scopes);
        self
    }

    /// A resource with fixed text.
    pub fn text(
        uri: impl Into<String>,
        name: impl Into<String>,
        mime_type: &str,
        text: impl Into<String>,
    ) -> Self {
        let uri = uri.into();
        let contents = ResourceContents::text(uri.clone(), mime_type, text);
        Resource::new(uri, name, move |_cx| {
            std::future::ready(Ok(vec![contents.clone()]))
        })
        .mime_type(mime_type)
    }

    /// A resource with fixed binary contents.
    pub fn blob(
        uri: impl Into<String>,
        name: impl Into<String>,
        mime_type: &str,
        bytes: &[u8],
    ) -> Self {
        let uri = uri.into();
        let contents = ResourceContents::blob(uri.clone(), mime_type, bytes);
        Resource::new(uri, name, move |_cx| {
            std::future::ready(Ok(vec![contents.clone()]))
        })
        .mime_type(mime_type)
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.descriptor
            .insert("description".into(), Value::String(description.into()));
        self
    }

    /// Sets the display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.descriptor
            .insert("title".into(), Value::String(title.into()));
        self
    }

    /// Sets the media type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.descriptor
            .insert("mimeType".into(), Value::String(mime_type.into()));
        self
    }
}

/// A family of resources addressed by an RFC 6570 level-1 URI template such as
/// `file:///logs/{date}`: each `{name}` matches one non-empty path segment.
#[derive(Clone)]
pub struct ResourceTemplate {
    pub(crate) descriptor: Map<String, Value>,
    pub(crate) pattern: UriPattern,
    pub(crate) reader: Reader,
    pub(crate) scopes: Required,
}

impl ResourceTemplate {
    /// A template whose `read` receives the matched URI and its variables.
    pub fn new<F, Fut>(uri_template: impl Into<String>, name: impl Into<String>, read: F) -> Self
    where
        F: Fn(String, Map<String, Value>, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, RpcError>> + Send + 'static,
    {
        let template = uri_template.into();
        let read = Arc::new(read);
        ResourceTemplate {
            descriptor: descriptor("uriTemplate", &template, &name.into()),
            pattern: UriPattern::parse(&template),
            reader: Arc::new(move |uri, vars, cx| Box::pin(read(uri, vars, cx))),
            scopes: Required::default(),
        }
    }

    /// Requires these OAuth scopes (all of them) to see the template and read what it
    /// matches; enforced when the server is an OAuth resource server.
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        self.scopes = self.scopes.and(scopes);
        self
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.descriptor
            .insert("description".into(), Value::String(description.into()));
        self
    }

    /// Sets the media type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.descriptor
            .insert("mimeType".into(), Value::String(mime_type.into()));
        self
    }

    /// The variable names, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.pattern.parts.iter().filter_map(|part| match part {
            Part::Variable(name) => Some(name.as_str()),
            Part::Literal(_) => None,
        })
    }
}

#[derive(Debug, Clone)]
enum Part {
    Literal(String),
    Variable(String),
}

/// A parsed level-1 URI template.
#[derive(Debug, Clone)]
pub(crate) struct UriPattern {
    parts: Vec<Part>,
}

impl UriPattern {
    fn parse(template: &str) -> UriPattern {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(start) = rest.find('{') {
            let Some(len) = rest[start..].find('}') else {
                break;
            };
            if start > 0 {
                parts.push(Part::Literal(rest[..start].to_owned()));
            }
            parts.push(Part::Variable(rest[start + 1..start + len].to_owned()));
            rest = &rest[start + len + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        UriPattern { parts }
    }

    /// The variables when `uri` matches.
    pub(crate) fn matches(&self, uri: &str) -> Option<Map<String, Value>> {
        let mut vars = Map::new();
        let mut rest = uri;
        for (i, part) in self.parts.iter().enumerate() {
            match part {
                Part::Literal(literal) => rest = rest.strip_prefix(literal.as_str())?,
                Part::Variable(name) => {
                    let end = match self.parts.get(i + 1) {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains('/') {
                        return None;
                    }
                    vars.insert(name.clone(), Value::String(value.to_owned()));
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(vars)
    }
}

/// The resources and templates a server offers.
#[derive(Clone, Default)]
pub struct ResourceSet {
    pub(crate) resources: Vec<Resource>,
    pub(crate) templates: Vec<ResourceTemplate>,
}

impl ResourceSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a listed resource.
    pub fn with(mut self, resource: Resource) -> Self {
        self.resources.push(resource);
        self
    }

    /// Appends every resource and template of `other`. Two resources of one URI (or two templates
    /// of one URI template) fail the server's build.
    pub fn merge(mut self, other: ResourceSet) -> Self {
        self.resources.extend(other.resources);
        self.templates.extend(other.templates);
        self
    }

    /// Adds a template.
    pub fn with_template(mut self, template: ResourceTemplate) -> Self {
        self.templates.push(template);
        self
    }

    /// Whether there is nothing to offer.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.templates.is_empty()
    }

    /// The scopes reading `uri` requires: those of the resource or template that would serve it.
    pub(crate) fn scopes_for(&self, uri: &str) -> Option<&Required> {
        if let Some(resource) = self.resources.iter().find(|r| r.uri == uri) {
            return Some(&resource.scopes);
        }
        self.templates
            .iter()
            .find(|t| t.pattern.matches(uri).is_some())
            .map(|t| &t.scopes)
    }

    /// Reads `uri`: a listed resource first, then the first matching template.
    pub(crate) fn read(
        &self,
        uri: &str,
        cx: Context,
    ) -> Option<BoxFuture<'static, Result<Vec<ResourceContents>, RpcError>>> {
        if let Some(resource) = self.resources.iter().find(|r| r.uri == uri) {
            return Some((resource.reader)(uri.to_owned(), Map::new(), cx));
        }
        self.templates.iter().find_map(|template| {
            template
                .pattern
                .matches(uri)
                .map(|vars| (template.reader)(uri.to_owned(), vars, cx.clone()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_one_templates_match_one_segment_per_variable() {
        let pattern = UriPattern::parse("test://template/{id}/data");
        assert_eq!(
            pattern.matches("test://template/123/data").unwrap()["id"],
            "123"
        );
        assert!(pattern.matches("test://template//data").is_none());
        assert!(pattern.matches("test://template/1/2/data").is_none());
        assert!(pattern.matches("test://template/123/data/x").is_none());
        let tail = UriPattern::parse("file:///logs/{date}");
        assert_eq!(
            tail.matches("file:///logs/2026-01-01").unwrap()["date"],
            "2026-01-01"
        );
    }
}
