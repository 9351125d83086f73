//! Prompts: named message templates the client can fetch with arguments.

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::protocol::content::Content;
use crate::protocol::error::RpcError;
use crate::protocol::input::InputRequired;
use crate::tools::BoxFuture;
use crate::tools::reply::ToolReply;

/// Who speaks a prompt message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user.
    User,
    /// The assistant.
    Assistant,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptMessage {
    /// Who speaks.
    pub role: Role,
    /// What is said.
    pub content: Content,
}

impl PromptMessage {
    /// A user message.
    pub fn user(content: Content) -> Self {
        PromptMessage {
            role: Role::User,
            content,
        }
    }

    /// An assistant message.
    pub fn assistant(content: Content) -> Self {
        PromptMessage {
            role: Role::Assistant,
            content,
        }
    }
}

/// What `prompts/get` returns.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GetPromptResult {
    /// Optional description of this rendering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages.
    pub messages: Vec<PromptMessage>,
}

impl From<Vec<PromptMessage>> for GetPromptResult {
    fn from(messages: Vec<PromptMessage>) -> Self {
        GetPromptResult {
            description: None,
            messages,
        }
    }
}

/// What a prompt renderer may return: messages, or a request for client input first.
pub trait IntoPromptReply {
    /// Converts the value.
    fn into_prompt_reply(self) -> ToolReply<GetPromptResult>;
}

impl IntoPromptReply for GetPromptResult {
    fn into_prompt_reply(self) -> ToolReply<GetPromptResult> {
        ToolReply::Complete(self)
    }
}

impl IntoPromptReply for Vec<PromptMessage> {
    fn into_prompt_reply(self) -> ToolReply<GetPromptResult> {
        ToolReply::Complete(self.into())
    }
}

impl IntoPromptReply for InputRequired {
    fn into_prompt_reply(self) -> ToolReply<GetPromptResult> {
        ToolReply::InputRequired(self)
    }
}

impl IntoPromptReply for ToolReply<GetPromptResult> {
    fn into_prompt_reply(self) -> ToolReply<GetPromptResult> {
        self
    }
}

type Render = Arc<
    dyn Fn(
            Map<String, Value>,
            Context,
        ) -> BoxFuture<'static, Result<ToolReply<GetPromptResult>, RpcError>>
        + Send
        + Sync,
>;

/// A prompt: a name, a description, declared arguments and a renderer.
#[derive(Clone)]
pub struct Prompt {
    pub(crate) name: String,
    pub(crate) descriptor: Map<String, Value>,
    pub(crate) required: Vec<String>,
    pub(crate) render: Render,
    pub(crate) scopes: crate::auth::scope::Required,
}

impl Prompt {
    /// A prompt rendered by `render` from its string arguments.
    pub fn new<F, Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        render: F,
    ) -> Self
    where
        F: Fn(Map<String, Value>, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
        R: IntoPromptReply,
    {
        let name = name.into();
        let render = Arc::new(render);
        let mut descriptor = Map::new();
        descriptor.insert("name".into(), json!(name));
        descriptor.insert("description".into(), json!(description.into()));
        Prompt {
            name,
            descriptor,
            required: Vec::new(),
            scopes: Default::default(),
            render: Arc::new(move |args, cx| {
                let rendering = render(args, cx);
                Box::pin(async move { rendering.await.map(IntoPromptReply::into_prompt_reply) })
            }),
        }
    }

    /// Declares an argument.
    pub fn argument(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        required: bool,
    ) -> Self {
        let name = name.into();
        if required {
            self.required.push(name.clone());
        }
        let arguments = self
            .descriptor
            .entry("arguments")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = arguments {
            list.push(
                json!({ "name": name, "description": description.into(), "required": required }),
            );
        }
        self
    }

    /// Sets the display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.descriptor.insert("title".into(), json!(title.into()));
        self
    }

    /// Requires these OAuth scopes (all of them) to see and get the prompt, and to complete its
    /// arguments; enforced when the server is an OAuth resource server.
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<std::borrow::Cow<'static, str>>,
    {
        self.scopes = self.scopes.and(scopes);
        self
    }

    /// Checks the arguments, then renders.
    pub(crate) fn get(
        &self,
        arguments: Map<String, Value>,
        cx: Context,
    ) -> BoxFuture<'static, Result<ToolReply<GetPromptResult>, RpcError>> {
        if let Some(missing) = self
            .required
            .iter()
            .find(|name| !arguments.contains_key(*name))
        {
            let error = RpcError::invalid_params(format!(
                "Prompt {} needs the argument {missing:?}",
                self.name
            ));
            return Box::pin(std::future::ready(Err(error)));
        }
        if let Some((name, _)) = arguments.iter().find(|(_, v)| !v.is_string()) {
            let error =
                RpcError::invalid_params(format!("Prompt argument {name:?} must be a string"));
            return Box::pin(std::future::ready(Err(error)));
        }
        (self.render)(arguments, cx)
    }
}

/// The prompts a server offers, in listing order.
#[derive(Clone, Default)]
pub struct PromptSet {
    pub(crate) prompts: Vec<Prompt>,
}

impl PromptSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a prompt (replacing one of the same name).
    pub fn with(mut self, prompt: Prompt) -> Self {
        self.prompts.push(prompt);
        self
    }

    /// Appends every prompt of `other`. Two prompts of one name fail the server's build.
    pub fn merge(mut self, other: PromptSet) -> Self {
        self.prompts.extend(other.prompts);
        self
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|p| p.name == name)
    }
}
