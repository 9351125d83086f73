//! Values a tool function receives from the request rather than from its arguments.

use crate::context::Context;
use crate::protocol::tool_error::ToolError;

/// Shared application state, registered with
/// [`McpServerBuilder::state`](crate::McpServerBuilder::state) and received by a `#[tool]`
/// function as a parameter of type `State<T>` (axum's `State` is the model). The parameter is not
/// part of the tool's input schema.
///
/// `T` is cloned for every call: register an `Arc` (or another cheap handle) for large state. If
/// no state of type `T` was registered, the call ends in an `isError` result with the code
/// `MISSING_STATE` naming the type; it never panics.
///
/// ```
/// use std::sync::Arc;
/// use mcp_tools::{State, tool};
///
/// struct Greeting(String);
///
/// /// Greets the caller with the configured greeting.
/// #[tool]
/// fn greet(greeting: State<Arc<Greeting>>, name: String) -> String {
///     format!("{}, {name}!", greeting.0.0)
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State<T>(pub T);

impl<T> std::ops::Deref for State<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// The error code of a call whose tool needs state the server was not given.
pub use crate::protocol::framework::code::MISSING_STATE;

/// A value built from the request context. Implemented for [`Context`] and [`State<T>`]; the
/// `#[tool]` attribute uses it for parameters of those types.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be taken from the request context",
    label = "not a context parameter",
    note = "context parameters are `Context`, `&Context` and `State<T>` with `T: Clone + Send + Sync + 'static`"
)]
pub trait FromContext: Sized {
    /// Extracts the value, or the tool error the call ends with.
    fn from_context(cx: &Context) -> Result<Self, ToolError>;
}

impl FromContext for Context {
    fn from_context(cx: &Context) -> Result<Self, ToolError> {
        Ok(cx.clone())
    }
}

impl<T: Clone + Send + Sync + 'static> FromContext for State<T> {
    fn from_context(cx: &Context) -> Result<Self, ToolError> {
        match cx.state::<T>() {
            Some(state) => Ok(State(state.clone())),
            None => Err(ToolError::new(
                MISSING_STATE,
                format!(
                    "The server has no state of type `{}`: register it with `McpServer::builder(..).state(..)`.",
                    std::any::type_name::<T>()
                ),
            )),
        }
    }
}
