//! What is wrong with an OAuth configuration, found when it is made or when the server is built.

/// An OAuth setting that cannot work: a verifier's issuer, key set or URL, or the resource
/// server's settings. [`BuildError`](crate::BuildError) converts from it, so `?` works in a
/// function that builds the whole server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The settings are incomplete or contradictory; the message says which and how to fix it.
    #[error("invalid OAuth settings: {0}")]
    Invalid(String),
    /// A scope the settings name is not an RFC 6749 scope token.
    #[error(
        "{owner} requires the scope {scope:?}, which is not a scope token: use printable ASCII without spaces, quotes or backslashes"
    )]
    InvalidScope {
        /// What requires it: `the server`, or the setting that names it.
        owner: String,
        /// The scope as written.
        scope: String,
    },
}
