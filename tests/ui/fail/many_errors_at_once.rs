use mcp_tools::tool;

// Every mistake is reported in one build, and code that does not involve the
// tool keeps compiling.
#[tool(name = "", read_onyl, title = "Lookup")]
fn lookup(expected_version: u64, (a, b): (u8, u8)) -> String {
    format!("{expected_version} {a} {b}")
}

fn unrelated() -> u32 {
    lookup(1, (2, 3)).len() as u32
}

fn main() {
    let _ = unrelated();
}
