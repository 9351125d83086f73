use mcp_tools::tool;

struct Server;

impl Server {
    /// Says hello.
    #[tool]
    fn hello(&self, name: String) -> String {
        format!("hello {name}")
    }
}

fn main() {}
