use mcp_tools::IntoToolError;

#[derive(Debug, IntoToolError)]
enum BookingError {
    /// No such room.
    #[code = "NOT_FOUND"]
    #[recovery = "stop"]
    NoSuchRoom,
    /// No such room.
    #[code = "NOT_FOUND"]
    #[recovery = "create_new"]
    RoomRemoved,
    /// The guest is unknown.
    #[code = "NOT_FOUND"]
    #[recovery = "stop"]
    NoSuchGuest,
}

fn main() {}
