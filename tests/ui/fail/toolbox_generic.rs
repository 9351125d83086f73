use mcp_tools::{tool, toolbox};

struct Store<T>(T);

#[toolbox]
impl<T: Send + Sync + 'static> Store<T> {
    /// Says hello.
    #[tool]
    fn hello(&self) -> String {
        "hello".into()
    }
}

fn main() {}
