//! Who is calling: what authentication produces, and what handles, operation ids and tasks
//! are bound to.

use std::sync::Arc;

/// Who is calling. Handles and operation ids are bound to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Principal {
    /// No authentication is configured: handles act as bearer capabilities.
    #[default]
    Anonymous,
    /// An authenticated subject.
    Subject(Arc<str>),
}

impl Principal {
    /// An authenticated subject.
    pub fn subject(id: impl Into<Arc<str>>) -> Self {
        Principal::Subject(id.into())
    }

    /// A stable key for storage: empty for the anonymous principal.
    pub fn key(&self) -> &str {
        match self {
            Principal::Anonymous => "",
            Principal::Subject(id) => id,
        }
    }
}
