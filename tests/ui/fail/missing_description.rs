use mcp_tools::tool;

#[tool]
fn read(path: String) -> String {
    path
}

fn main() {}
