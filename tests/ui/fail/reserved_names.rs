use mcp_tools::tool;

/// Updates a record.
#[tool]
fn update(
    expected_version: u64,
    #[arg(rename = "operation_id")] op: String,
    #[arg(rename = "_meta")] meta: String,
    basis_version: u64,
) -> String {
    format!("{expected_version} {op} {meta} {basis_version}")
}

fn main() {}
