use mcp_tools::tool;

/// Reads a file.
#[tool(name = "a_tool_name_that_goes_on_and_on_well_past_the_sixty_four_character_limit")]
fn read(path: String) -> String {
    path
}

fn main() {}
