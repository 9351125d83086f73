use mcp_tools::{tool, toolbox};

struct Counter {
    value: u64,
}

#[toolbox]
impl Counter {
    /// Increments the counter.
    #[tool]
    fn increment(&mut self) -> String {
        self.value += 1;
        self.value.to_string()
    }
}

fn main() {}
