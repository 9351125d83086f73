use mcp_tools::IntoToolError;

#[derive(Debug, IntoToolError)]
#[recovery = "stop"]
enum BookingError {
    /// A bare attribute.
    #[recovery]
    Bare,
    /// Not a string.
    #[recovery = stop]
    NotAString,
    /// A known name written as a key.
    #[recovery(stop)]
    AsKey,
    /// A name of one's own written as a key.
    #[recovery(ask_the_owner)]
    OwnAsKey,
    /// A custom hint without its value.
    #[recovery(custom)]
    NoValue,
    /// A misspelled key.
    #[recovery(kustom = "ask_the_owner")]
    Misspelled,
    /// Nothing inside.
    #[recovery()]
    Empty,
    /// Two hints.
    #[recovery = "stop"]
    #[recovery = "reconfirm"]
    Twice,
}

#[derive(Debug, IntoToolError)]
#[recovery(custom = 7)]
struct Refused;

fn main() {}
