use mcp_tools::tool;

/// Peeks at memory.
#[tool]
unsafe fn peek(address: usize) -> String {
    address.to_string()
}

fn main() {}
