use mcp_tools::IntoToolError;

#[derive(Debug, IntoToolError)]
enum BookingError {
    /// The room is taken for those nights.
    #[recovery = "retry_latr"]
    RoomTaken,
    /// The hotel has closed its bookings.
    #[recovery = "give_up"]
    Closed,
}

fn main() {}
