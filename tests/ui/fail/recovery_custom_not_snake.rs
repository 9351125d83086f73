use mcp_tools::IntoToolError;

#[derive(Debug, IntoToolError)]
enum BookingError {
    /// The booking needs the manager's approval.
    #[recovery(custom = "AskTheManager")]
    NeedsApproval,
    /// The card was declined; pay another way.
    #[recovery(custom = "pay-another-way")]
    Declined,
    /// Known hints have their own form.
    #[recovery(custom = "stop")]
    Closed,
}

fn main() {}
