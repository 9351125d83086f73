use mcp_tools::{tool, tools};

/// Says hello.
#[tool]
fn hello() -> &'static str {
    "hello"
}

fn main() {
    let set = tools![hello];
    assert_eq!(set.len(), 1);
    assert_eq!(hello(), "hello");
}
