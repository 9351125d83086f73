use mcp_tools::tool;

#[derive(Debug)]
struct Failure;

/// Might fail.
#[tool]
fn flaky(attempt: u32) -> Result<String, Failure> {
    if attempt > 1 { Ok("done".into()) } else { Err(Failure) }
}

fn main() {}
