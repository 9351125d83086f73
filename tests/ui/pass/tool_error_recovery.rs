use std::fmt;

use mcp_tools::tools::DomainCode;
use mcp_tools::{IntoToolError, Recovery, ToolError};

#[derive(Debug, IntoToolError)]
enum BookingError {
    /// The room is taken for those nights.
    #[recovery = "refresh_and_replan"]
    RoomTaken { room: String },
    /// The booking needs the manager's approval.
    #[recovery(custom = "ask_the_manager")]
    NeedsApproval(u32),
    /// Codes are kept as written.
    #[code = "room-closed"]
    Closed,
}

impl fmt::Display for BookingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("refused")
    }
}

/// The clerk is away.
#[derive(Debug, IntoToolError)]
#[recovery = "retry_later"]
struct Away;

impl fmt::Display for Away {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("away")
    }
}

/// A generic error declares its codes too.
#[derive(Debug, IntoToolError)]
enum Wrapped<E: fmt::Debug> {
    /// The inner call failed; try again later.
    #[recovery = "retry_later"]
    Inner(E),
}

impl<E: fmt::Debug> fmt::Display for Wrapped<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

fn main() {
    let codes: &'static [DomainCode] = BookingError::declared_codes().unwrap();
    assert_eq!(codes.len(), 3);
    assert_eq!(codes[2].code, "room-closed");
    assert_eq!(
        codes[1].recovery,
        Some(Recovery::Other("ask_the_manager".into()))
    );
    let error: ToolError = Away.into_tool_error();
    assert_eq!(error.recovery(), Some(&Recovery::RetryLater));
    assert_eq!(
        Away::declared_codes().unwrap()[0].description,
        "The clerk is away."
    );
    assert_eq!(Wrapped::<u8>::declared_codes().unwrap()[0].code, "INNER");
    assert_eq!(
        Wrapped::Inner(1u8).into_tool_error().recovery(),
        Some(&Recovery::RetryLater)
    );
}
