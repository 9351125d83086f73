//! What the builder refuses, and what it merges: mistakes in the offer are errors when the server
//! is built, naming what to fix, not failures of the first request that meets them.

use crate::basket;

use mcp_tools::MemoryStore;
use mcp_tools::prompts::{Prompt, PromptMessage, PromptSet};
use mcp_tools::protocol::RpcError;
use mcp_tools::resources::{Resource, ResourceSet};
use mcp_tools::tools::ToolSet;
use mcp_tools::{BuildError, McpServer};

fn prompt(name: &str) -> Prompt {
    Prompt::new(name, "A prompt.", |_, _| async {
        Ok::<_, RpcError>(Vec::<PromptMessage>::new())
    })
}

fn resource(uri: &str) -> Resource {
    Resource::text(uri, "A resource", "text/plain", "text")
}

#[test]
fn stateful_tools_without_a_store_do_not_build_and_the_error_names_them() {
    let error = McpServer::builder("baskets", "1")
        .tools(basket::tool_set())
        .build()
        .err()
        .expect("a server with stateful tools and no store was built");
    let BuildError::MissingStore(tools) = &error else {
        panic!("expected MissingStore, got {error:?}");
    };
    assert!(tools.contains(&"basket_create".to_owned()), "{tools:?}");
    assert!(tools.contains(&"basket_get".to_owned()), "{tools:?}");
    assert!(error.to_string().contains(".store("), "{error}");

    let built = McpServer::builder("baskets", "1")
        .tools(basket::tool_set())
        .store(MemoryStore::default())
        .build();
    assert!(built.is_ok(), "{:?}", built.err());
}

#[test]
fn a_stateful_tool_added_while_serving_needs_a_store_too() {
    let stateless = McpServer::builder("plain", "1")
        .tools(ToolSet::new())
        .build()
        .unwrap();
    let refused = stateless.add_tool(basket::basket_get::tool());
    assert!(
        matches!(&refused, Err(BuildError::MissingStore(tools)) if tools == &["basket_get"]),
        "{refused:?}"
    );
    let with_store = McpServer::builder("plain", "1")
        .store(MemoryStore::default())
        .build()
        .unwrap();
    with_store.add_tool(basket::basket_get::tool()).unwrap();
}

#[test]
fn two_prompts_or_resources_of_one_name_do_not_build() {
    let prompts = McpServer::builder("x", "1")
        .prompts(PromptSet::new().with(prompt("greet")).with(prompt("greet")))
        .build();
    assert!(
        matches!(&prompts, Err(BuildError::DuplicatePrompt(name)) if name == "greet"),
        "{:?}",
        prompts.err()
    );
    let resources = McpServer::builder("x", "1")
        .resources(
            ResourceSet::new()
                .with(resource("docs://a"))
                .with(resource("docs://a")),
        )
        .build();
    assert!(
        matches!(&resources, Err(BuildError::DuplicateResource(uri)) if uri == "docs://a"),
        "{:?}",
        resources.err()
    );
    // Across two calls of the builder too: they merge, so the second one does not hide the clash.
    let across_calls = McpServer::builder("x", "1")
        .prompts(PromptSet::new().with(prompt("greet")))
        .prompts(PromptSet::new().with(prompt("greet")))
        .build();
    assert!(matches!(across_calls, Err(BuildError::DuplicatePrompt(_))));
}

#[tokio::test]
async fn repeated_builder_calls_merge_what_they_offer() {
    let server = McpServer::builder("x", "1")
        .prompts(PromptSet::new().with(prompt("one")))
        .prompts(PromptSet::new().with(prompt("two")))
        .resources(ResourceSet::new().with(resource("docs://a")))
        .resources(ResourceSet::new().with(resource("docs://b")))
        .build()
        .unwrap();
    let client = mcp_tools::testing::TestClient::new(server);
    let listed = |method: &'static str| {
        let client = &client;
        async move {
            tokio::time::timeout(
                std::time::Duration::from_secs(30),
                client.request(method, serde_json::json!({})),
            )
            .await
            .expect("an in-process list timed out")
            .unwrap()
        }
    };
    let prompts = listed("prompts/list").await;
    let names: Vec<&str> = prompts["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["one", "two"]);
    let resources = listed("resources/list").await;
    let uris: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["docs://a", "docs://b"]);
}

/// Arguments whose `x-mcp-header` declarations clients would drop the tool for.
// Only their schemas matter: no call reads a field.
#[allow(dead_code)]
mod mirrored {
    use schemars::JsonSchema;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    pub struct Spaced {
        #[schemars(extend("x-mcp-header" = "Data Region"))]
        pub region: String,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Fractional {
        #[schemars(extend("x-mcp-header" = "Ratio"))]
        pub ratio: f64,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Line {
        #[schemars(extend("x-mcp-header" = "Sku"))]
        pub sku: String,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Listed {
        pub lines: Vec<Line>,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Twice {
        #[schemars(extend("x-mcp-header" = "Zone"))]
        pub zone: String,
        #[schemars(extend("x-mcp-header" = "ZONE"))]
        pub fallback_zone: Option<String>,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Fine {
        #[schemars(extend("x-mcp-header" = "Zone"))]
        pub zone: Option<String>,
        #[schemars(extend("x-mcp-header" = "Shard"))]
        pub shard: u32,
        #[schemars(extend("x-mcp-header" = "Dry-Run"))]
        pub dry_run: bool,
        #[schemars(extend("x-mcp-header" = "Colour"))]
        pub colour: Option<Colour>,
    }

    /// Inline, so that the property says `"type": "string"` rather than `$ref`.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(inline)]
    pub enum Colour {
        Red,
        Blue,
    }

    /// A tool taking `A`, named `name`.
    pub struct Mirroring<A>(pub &'static str, pub std::marker::PhantomData<fn() -> A>);

    impl<A: for<'de> Deserialize<'de> + JsonSchema + Send + 'static> mcp_tools::tools::Tool
        for Mirroring<A>
    {
        type Args = A;
        type Output = String;
        fn info(&self) -> mcp_tools::tools::ToolInfo {
            mcp_tools::tools::ToolInfo::new(self.0, "Mirrors an argument in a header.")
        }
        async fn call(&self, _: A, _: mcp_tools::Context) -> String {
            String::new()
        }
    }

    pub fn tool<A>(name: &'static str) -> Mirroring<A> {
        Mirroring(name, std::marker::PhantomData)
    }
}

#[test]
fn a_header_mirror_that_clients_would_drop_the_tool_for_does_not_build() {
    use mirrored::*;
    let refusal = |tools: ToolSet| {
        let error = McpServer::builder("x", "1")
            .tools(tools)
            .build()
            .err()
            .expect("a tool with an invalid x-mcp-header was built");
        let BuildError::InvalidParamHeader { tool, reason } = &error else {
            panic!("expected InvalidParamHeader, got {error:?}");
        };
        (tool.clone(), reason.clone(), error.to_string())
    };
    for (tools, name, expected) in [
        (
            ToolSet::new().with(tool::<Spaced>("spaced")),
            "spaced",
            "x-mcp-header \"Data Region\" at /properties/region is not a header name token",
        ),
        (
            ToolSet::new().with(tool::<Fractional>("fractional")),
            "fractional",
            "x-mcp-header \"Ratio\" at /properties/ratio is on a property that is not a string, integer or boolean (its `type` is \"number\")",
        ),
        (
            ToolSet::new().with(tool::<Listed>("listed")),
            "listed",
            "x-mcp-header at /$defs/Line/properties/sku is not on a property reached from the root through `properties` alone (not through `items`, `anyOf`, `$ref`, `$defs`...): the property belongs to a type the schema refers to: put `#[schemars(inline)]` on that type when an argument holds it directly (in a list, a map or an enum it cannot be mirrored)",
        ),
        (
            ToolSet::new().with(tool::<Twice>("twice")),
            "twice",
            "x-mcp-header \"ZONE\" at /properties/fallback_zone and \"Zone\" at /properties/zone name one header",
        ),
    ] {
        let (tool, reason, message) = refusal(tools);
        assert_eq!(tool, name);
        assert!(reason.contains(expected), "{name}: {reason}");
        assert!(
            message.starts_with(&format!("tool \"{name}\" mirrors an argument in a header")),
            "{message}"
        );
    }

    let fine = McpServer::builder("x", "1")
        .tools(ToolSet::new().with(tool::<Fine>("fine")))
        .build()
        .expect("string, integer and boolean mirrors build");
    // Added while serving, the same declaration is refused and the offer stays as it was.
    let refused = fine.add_tool(tool::<Spaced>("spaced"));
    assert!(
        matches!(&refused, Err(BuildError::InvalidParamHeader { tool, .. }) if tool == "spaced"),
        "{refused:?}"
    );
}
