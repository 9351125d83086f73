//! Scopes per tool, resource, template and prompt under OAuth, over real HTTP: refusals with
//! `insufficient_scope` challenges (from the routing headers before the body is read, and from the
//! body in every era), listings filtered per caller, default and implied scopes, the scopes a tool
//! sees, and principals named by issuer and subject.

use crate::basket;
use crate::basket_client;
use crate::common;

use std::sync::{Arc, Mutex};

use basket_client::{Agent, operation_id, outcome};
use common::events::Events;
use common::oauth::{Challenge, Issuer, METADATA_URL, RESOURCE};
use common::{Call, Reply, TestServer, assert_conforms, within};
use mcp_tools::MemoryStore;
use mcp_tools::auth::{JwtVerifier, OAuth, TokenRejection, TokenVerifier, VerifyFuture};
use mcp_tools::completion::{CompletionTarget, Completions};
use mcp_tools::prompts::{Prompt, PromptMessage, PromptSet};
use mcp_tools::protocol::RpcError;
use mcp_tools::resources::{Resource, ResourceContents, ResourceSet, ResourceTemplate};
use mcp_tools::tools::{Content, NoArgs, Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, McpServer, McpServerBuilder};
use serde_json::{Value, json};

/// What ran on a server: tool calls, resource reads, prompt renderings and completions, by name,
/// so a test can tell a refused request from one that ran.
#[derive(Clone, Default)]
struct Ran(Arc<Mutex<Vec<String>>>);

impl Ran {
    fn record(&self, what: &str) {
        self.0.lock().unwrap().push(what.to_owned());
    }

    fn count(&self, what: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|w| *w == what).count()
    }
}

/// A tool requiring `scopes` that records each of its runs.
struct Scoped {
    name: &'static str,
    scopes: &'static [&'static str],
    ran: Ran,
}

impl Tool for Scoped {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        ToolInfo::new(self.name, "Records its runs.").scopes(self.scopes.iter().copied())
    }
    async fn call(&self, _: NoArgs, _: Context) -> &'static str {
        self.ran.record(self.name);
        self.name
    }
}

/// The tools `(name, scopes)`, each recording its runs in `ran`.
fn scoped_tools(ran: &Ran, tools: &[(&'static str, &'static [&'static str])]) -> ToolSet {
    tools.iter().fold(ToolSet::new(), |set, &(name, scopes)| {
        set.with(Scoped {
            name,
            scopes,
            ran: ran.clone(),
        })
    })
}

/// `view` requires `basket:read`, `change` requires `basket:write`.
const VIEW_AND_CHANGE: &[(&str, &[&str])] =
    &[("view", &["basket:read"]), ("change", &["basket:write"])];

/// A resource server of tools that record their runs, and the issuer of its tokens.
struct Tools {
    issuer: Issuer,
    ran: Ran,
    http: TestServer,
}

impl Tools {
    /// Serves the tools `(name, scopes)` behind a new issuer's tokens; `configure` sets the rest
    /// of the server, the OAuth settings included.
    async fn serve(
        tools: &[(&'static str, &'static [&'static str])],
        configure: impl FnOnce(McpServerBuilder, OAuth) -> McpServerBuilder,
    ) -> Tools {
        let issuer = Issuer::start().await;
        let ran = Ran::default();
        let builder = builder().tools(scoped_tools(&ran, tools));
        let http = start(configure(builder, oauth(&issuer))).await;
        Tools { issuer, ran, http }
    }

    /// Calls the tool `name` with `token`, asserting it is served and has now run `runs` times.
    async fn assert_runs(&self, label: &str, name: &str, token: &str, runs: usize) {
        let reply = call_tool(name, token).send(&self.http).await;
        assert_served(label, &reply, "CallToolResultResponse");
        assert_eq!(self.ran.count(name), runs, "{label}");
    }

    /// Calls the tool `name` with `token`, asserting it is refused for lacking `scopes` and has
    /// still run only `runs` times.
    async fn assert_refused(
        &self,
        label: &str,
        name: &str,
        token: &str,
        scopes: &str,
        runs: usize,
    ) {
        let reply = call_tool(name, token).send(&self.http).await;
        assert_insufficient(label, &reply, scopes);
        assert_eq!(self.ran.count(name), runs, "{label}");
    }

    async fn tool_names(&self, token: &str) -> Vec<String> {
        listed(&self.http, "tools/list", "tools", token).await
    }
}

/// Answers with the scopes the request's context says were granted, as JSON (`null` for none).
struct GrantedScopes;

impl Tool for GrantedScopes {
    type Args = NoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("granted_scopes", "Names the scopes granted to the caller.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> String {
        let granted: Option<Vec<&str>> = cx.granted_scopes().map(|g| g.iter().collect());
        serde_json::to_string(&granted).unwrap()
    }
}

fn oauth(issuer: &Issuer) -> OAuth {
    let verifier = JwtVerifier::with_jwks(&issuer.url, &issuer.jwks_url()).unwrap();
    OAuth::new(RESOURCE, verifier).authorization_server(&issuer.url)
}

fn builder() -> McpServerBuilder {
    McpServer::builder("scopes", "1")
}

async fn start(builder: McpServerBuilder) -> TestServer {
    TestServer::start(builder.build().unwrap()).await
}

fn bearer(call: Call, token: &str) -> Call {
    call.header("authorization", &format!("Bearer {token}"))
}

fn call_tool(name: &str, token: &str) -> Call {
    bearer(Call::call_tool(name, json!({})), token)
}

/// Asserts `reply` is the 403 refusal of a token lacking some of `scopes` (space separated,
/// sorted): every scope the item requires, whatever the token already grants.
fn assert_insufficient(label: &str, reply: &Reply, scopes: &str) {
    assert_eq!(reply.status, 403, "{label}: {}", reply.text);
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_eq!(body["error"]["code"], -32600, "{label}: {body}");
    let challenge = Challenge::bearer(&reply.headers);
    assert_eq!(
        challenge.names(),
        ["error", "error_description", "resource_metadata", "scope"],
        "{label}: {challenge:?}"
    );
    assert_eq!(
        challenge.get("error"),
        Some("insufficient_scope"),
        "{label}"
    );
    assert_eq!(challenge.get("scope"), Some(scopes), "{label}");
    assert_eq!(
        challenge.get("resource_metadata"),
        Some(METADATA_URL),
        "{label}"
    );
    assert!(
        challenge
            .get("error_description")
            .is_some_and(|d| d.contains(scopes)),
        "{label}: {challenge:?}"
    );
}

/// Asserts `reply` is a 200 result valid as `definition`; returns the result.
fn assert_served(label: &str, reply: &Reply, definition: &str) -> Value {
    assert_eq!(reply.status, 200, "{label}: {}", reply.text);
    let body = reply.json();
    assert_conforms(definition, &body);
    body["result"].clone()
}

/// The schema definition of a listing method's response.
fn list_definition(method: &str) -> &'static str {
    match method {
        "tools/list" => "ListToolsResultResponse",
        "resources/list" => "ListResourcesResultResponse",
        "resources/templates/list" => "ListResourceTemplatesResultResponse",
        "prompts/list" => "ListPromptsResultResponse",
        _ => panic!("not a listing: {method}"),
    }
}

/// Every item of a listing as `token` sees it, following `nextCursor`; every page is private.
async fn list_all(server: &TestServer, method: &str, member: &str, token: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<Value> = None;
    for _ in 0..20 {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let reply = bearer(Call::new(method, json!(2), params), token)
            .send(server)
            .await;
        let page = assert_served(method, &reply, list_definition(method));
        assert_eq!(page["cacheScope"], "private", "{method}: {page}");
        items.extend(page[member].as_array().unwrap().iter().cloned());
        match page.get("nextCursor") {
            Some(next) => cursor = Some(next.clone()),
            None => return items,
        }
    }
    panic!("{method}: more than 20 pages");
}

/// The `name` (or `uri`, `uriTemplate`) of every item `token` sees listed.
async fn listed(server: &TestServer, method: &str, member: &str, token: &str) -> Vec<String> {
    let key = match member {
        "resources" => "uri",
        "resourceTemplates" => "uriTemplate",
        _ => "name",
    };
    list_all(server, method, member, token)
        .await
        .iter()
        .map(|item| item[key].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_token_lacking_a_tools_scopes_is_refused_403_naming_every_scope_and_the_tool_does_not_run()
 {
    let server = Tools::serve(
        &[
            ("view", &["basket:read"]),
            ("change", &["basket:write"]),
            ("export", &["report:export", "basket:read"]),
        ],
        |b, o| b.oauth(o),
    )
    .await;
    let read = server.issuer.token("alice", "basket:read");

    server.assert_runs("view", "view", &read, 1).await;
    server
        .assert_refused("change", "change", &read, "basket:write", 0)
        .await;
    // The token grants one of the two: the challenge still names both, so one new token serves.
    server
        .assert_refused("export", "export", &read, "basket:read report:export", 0)
        .await;
}

#[tokio::test]
async fn the_scope_check_on_the_routing_headers_runs_before_the_body_is_read() {
    let resources = ResourceSet::new().with(
        Resource::text("basket://orders", "Orders", "text/plain", "none").scopes(["orders:read"]),
    );
    let server = Tools::serve(VIEW_AND_CHANGE, |b, o| b.resources(resources).oauth(o)).await;
    let read = server.issuer.token("alice", "basket:read");
    let not_json = b"this is not JSON at all".to_vec();

    let refused = call_tool("change", &read)
        .raw(not_json.clone())
        .send(&server.http)
        .await;
    assert_insufficient("change, body not JSON", &refused, "basket:write");
    assert_eq!(server.ran.count("change"), 0);

    // The same body for an operation the token may use is read, and refused as what it is.
    let parsed = call_tool("view", &read)
        .raw(not_json.clone())
        .send(&server.http)
        .await;
    assert_eq!(
        (parsed.status, parsed.error_code()),
        (400, Some(-32700)),
        "{}",
        parsed.text
    );
    assert_conforms("JSONRPCErrorResponse", &parsed.json());

    // `Mcp-Name` of a `resources/read` is the URI.
    let read_call = Call::new(
        "resources/read",
        json!(3),
        json!({ "uri": "basket://orders" }),
    )
    .header("mcp-name", "basket://orders");
    let unread = bearer(read_call, &read)
        .raw(not_json.clone())
        .send(&server.http)
        .await;
    assert_insufficient("resources/read, body not JSON", &unread, "orders:read");

    // A name sent in its Base64 form is judged decoded.
    let encoded = call_tool("change", &read)
        .header("mcp-name", "=?base64?Y2hhbmdl?=")
        .raw(not_json)
        .send(&server.http)
        .await;
    assert_insufficient(
        "change named in Base64, body not JSON",
        &encoded,
        "basket:write",
    );
    assert_eq!(server.ran.count("change"), 0);
}

#[tokio::test]
async fn a_legacy_request_naming_a_scoped_tool_only_in_its_body_is_refused_403() {
    let server = Tools::serve(VIEW_AND_CHANGE, |b, o| b.legacy_era(true).oauth(o)).await;
    let read = server.issuer.token("alice", "basket:read");
    // A 2025-11-25 client: no version or routing headers, no `_meta`.
    let legacy = |name: &str| {
        let body = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": { "name": name, "arguments": {} } });
        bearer(
            Call::discover()
                .without_header("mcp-protocol-version")
                .without_header("mcp-method")
                .raw(serde_json::to_vec(&body).unwrap()),
            &read,
        )
    };

    let viewed = legacy("view").send(&server.http).await;
    assert_eq!(viewed.status, 200, "{}", viewed.text);
    assert_eq!(
        viewed.json()["result"]["content"][0]["text"],
        "view",
        "{}",
        viewed.text
    );
    assert_eq!(server.ran.count("view"), 1);

    let changed = legacy("change").send(&server.http).await;
    assert_insufficient("legacy change", &changed, "basket:write");
    assert_eq!(changed.json()["id"], 5);
    assert_eq!(server.ran.count("change"), 0);
}

#[tokio::test]
async fn tools_list_shows_each_caller_only_the_tools_its_token_may_call() {
    let server = Tools::serve(
        &[
            ("view", &["basket:read"]),
            ("change", &["basket:write"]),
            ("anyone", &[]),
        ],
        |b, o| b.oauth(o),
    )
    .await;

    let read = server.issuer.token("alice", "basket:read");
    assert_eq!(server.tool_names(&read).await, ["view", "anyone"]);
    let write = server.issuer.token("bob", "basket:read basket:write");
    assert_eq!(
        server.tool_names(&write).await,
        ["view", "change", "anyone"]
    );
    let none = server.issuer.token("carol", "");
    assert_eq!(server.tool_names(&none).await, ["anyone"]);
}

#[tokio::test]
async fn a_filtered_listing_pages_and_its_cursor_does_not_open_another_callers_listing() {
    let server = Tools::serve(
        &[
            ("view", &["basket:read"]),
            ("peek", &["basket:read"]),
            ("change", &["basket:write"]),
            ("anyone", &[]),
        ],
        |b, o| b.page_size(1).oauth(o),
    )
    .await;
    let read = server.issuer.token("alice", "basket:read");
    let write = server.issuer.token("bob", "basket:write");
    assert_eq!(server.tool_names(&read).await, ["view", "peek", "anyone"]);
    assert_eq!(server.tool_names(&write).await, ["change", "anyone"]);

    let first = bearer(Call::new("tools/list", json!(2), json!({})), &read)
        .send(&server.http)
        .await;
    let cursor =
        assert_served("first page", &first, "ListToolsResultResponse")["nextCursor"].clone();
    assert!(cursor.is_string(), "{}", first.text);
    let foreign = bearer(
        Call::new("tools/list", json!(3), json!({ "cursor": cursor })),
        &write,
    )
    .send(&server.http)
    .await;
    assert_eq!(foreign.error_code(), Some(-32602), "{}", foreign.text);
    let body = foreign.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_eq!(body["id"], 3);
}

#[tokio::test]
async fn default_scopes_apply_to_the_items_without_scopes_of_their_own_only() {
    let server = Tools::serve(&[("plain", &[]), ("own", &["basket:read"])], |b, o| {
        b.oauth(o.default_scopes(["mcp:use"]))
    })
    .await;
    let read = server.issuer.token("alice", "basket:read");
    let usage = server.issuer.token("bob", "mcp:use");

    server
        .assert_refused("plain, read token", "plain", &read, "mcp:use", 0)
        .await;
    server.assert_runs("own, read token", "own", &read, 1).await;

    server
        .assert_runs("plain, mcp:use token", "plain", &usage, 1)
        .await;
    server
        .assert_refused("own, mcp:use token", "own", &usage, "basket:read", 1)
        .await;

    assert_eq!(server.tool_names(&read).await, ["own"]);
    assert_eq!(server.tool_names(&usage).await, ["plain"]);
}

#[tokio::test]
async fn a_broader_scope_grants_the_narrower_ones_it_implies_and_not_the_reverse() {
    let server = Tools::serve(VIEW_AND_CHANGE, |b, o| {
        b.oauth(o.implies("basket:write", ["basket:read"]))
    })
    .await;
    let write = server.issuer.token("alice", "basket:write");
    server
        .assert_runs("view, write token", "view", &write, 1)
        .await;
    assert_eq!(server.tool_names(&write).await, ["view", "change"]);

    let read = server.issuer.token("bob", "basket:read");
    server
        .assert_refused("change, read token", "change", &read, "basket:write", 0)
        .await;
    assert_eq!(server.tool_names(&read).await, ["view"]);
}

#[tokio::test]
async fn implication_follows_a_chain_of_scopes() {
    let server = Tools::serve(
        &[
            ("view", &["basket:read"]),
            ("change", &["basket:write"]),
            ("manage", &["admin"]),
        ],
        // Declared broadest first, so the link from `admin` to `basket:read` is only found by
        // following `basket:write`.
        |b, o| {
            b.oauth(
                o.implies("admin", ["basket:write"])
                    .implies("basket:write", ["basket:read"]),
            )
        },
    )
    .await;
    let admin = server.issuer.token("alice", "admin");
    for name in ["view", "change", "manage"] {
        server.assert_runs(name, name, &admin, 1).await;
    }
    assert_eq!(
        server.tool_names(&admin).await,
        ["view", "change", "manage"]
    );
    let write = server.issuer.token("bob", "basket:write");
    assert_eq!(server.tool_names(&write).await, ["view", "change"]);
}

/// Resources and a template with scopes, each read recorded.
fn scoped_resources(ran: &Ran) -> ResourceSet {
    let reader = |uri: &'static str, ran: &Ran| {
        let ran = ran.clone();
        move |_cx: Context| {
            ran.record(uri);
            std::future::ready(Ok::<_, RpcError>(vec![ResourceContents::text(
                uri,
                "text/plain",
                uri,
            )]))
        }
    };
    let orders = ran.clone();
    ResourceSet::new()
        .with(
            Resource::new(
                "basket://catalog",
                "Catalog",
                reader("basket://catalog", ran),
            )
            .scopes(["basket:read"]),
        )
        .with(Resource::new(
            "basket://public",
            "Public",
            reader("basket://public", ran),
        ))
        .with_template(
            ResourceTemplate::new("basket://orders/{id}", "Orders", move |uri, _, _| {
                orders.record("basket://orders/{id}");
                std::future::ready(Ok::<_, RpcError>(vec![ResourceContents::text(
                    uri,
                    "text/plain",
                    "order",
                )]))
            })
            .scopes(["orders:read"]),
        )
}

fn read_resource(uri: &str, token: &str) -> Call {
    bearer(
        Call::new("resources/read", json!(4), json!({ "uri": uri })).header("mcp-name", uri),
        token,
    )
}

#[tokio::test]
async fn resources_and_templates_with_scopes_are_refused_and_listed_per_token() {
    let issuer = Issuer::start().await;
    let ran = Ran::default();
    let server = start(
        builder()
            .resources(scoped_resources(&ran))
            .oauth(oauth(&issuer)),
    )
    .await;
    let read = issuer.token("alice", "basket:read");
    let orders = issuer.token("bob", "orders:read");

    let catalog = read_resource("basket://catalog", &read).send(&server).await;
    let result = assert_served(
        "catalog, read token",
        &catalog,
        "ReadResourceResultResponse",
    );
    // Not every caller may read it, so no shared cache may keep it.
    assert_eq!(result["cacheScope"], "private", "{result}");
    assert_eq!(ran.count("basket://catalog"), 1);
    let refused = read_resource("basket://catalog", &orders)
        .send(&server)
        .await;
    assert_insufficient("catalog, orders token", &refused, "basket:read");
    assert_eq!(ran.count("basket://catalog"), 1);

    let order = read_resource("basket://orders/42", &read)
        .send(&server)
        .await;
    assert_insufficient("order, read token", &order, "orders:read");
    assert_eq!(ran.count("basket://orders/{id}"), 0);
    let order = read_resource("basket://orders/42", &orders)
        .send(&server)
        .await;
    assert_served("order, orders token", &order, "ReadResourceResultResponse");
    assert_eq!(ran.count("basket://orders/{id}"), 1);

    let resources = |token| listed(&server, "resources/list", "resources", token);
    assert_eq!(
        resources(&read).await,
        ["basket://catalog", "basket://public"]
    );
    assert_eq!(resources(&orders).await, ["basket://public"]);
    let templates = |token| {
        listed(
            &server,
            "resources/templates/list",
            "resourceTemplates",
            token,
        )
    };
    assert_eq!(templates(&read).await, Vec::<String>::new());
    assert_eq!(templates(&orders).await, ["basket://orders/{id}"]);
}

#[tokio::test]
async fn prompts_with_scopes_are_refused_listed_and_completed_per_token() {
    let issuer = Issuer::start().await;
    let ran = Ran::default();
    let rendered = ran.clone();
    let prompts = PromptSet::new()
        .with(
            Prompt::new("greet", "Greets someone.", move |_, _| {
                rendered.record("greet");
                std::future::ready(Ok::<_, RpcError>(vec![PromptMessage::user(Content::text(
                    "Hello",
                ))]))
            })
            .argument("name", "Who to greet.", false)
            .scopes(["prompts:use"]),
        )
        .with(Prompt::new("open", "Open to all.", |_, _| {
            std::future::ready(Ok::<_, RpcError>(vec![PromptMessage::user(Content::text(
                "Hi",
            ))]))
        }));
    let (names, ids) = (ran.clone(), ran.clone());
    let completions = Completions::new()
        .with(
            CompletionTarget::Prompt("greet".into()),
            "name",
            move |_, _, _| {
                names.record("complete greet");
                vec!["alice".to_owned()]
            },
        )
        .with(
            CompletionTarget::ResourceTemplate("basket://orders/{id}".into()),
            "id",
            move |_, _, _| {
                ids.record("complete orders");
                vec!["42".to_owned()]
            },
        );
    let server = start(
        builder()
            .prompts(prompts)
            .resources(scoped_resources(&ran))
            .completions(completions)
            .oauth(oauth(&issuer)),
    )
    .await;
    let without = issuer.token("alice", "basket:read");
    let with = issuer.token("bob", "prompts:use orders:read");
    let get = |token: &str| {
        bearer(
            Call::new(
                "prompts/get",
                json!(5),
                json!({ "name": "greet", "arguments": {} }),
            ),
            token,
        )
    };
    let complete = |reference: Value, argument: &str, token: &str| {
        bearer(
            Call::new(
                "completion/complete",
                json!(6),
                json!({ "ref": reference, "argument": { "name": argument, "value": "" } }),
            ),
            token,
        )
    };
    let greet = json!({ "type": "ref/prompt", "name": "greet" });
    let orders = json!({ "type": "ref/resource", "uri": "basket://orders/{id}" });

    assert_insufficient(
        "prompts/get",
        &get(&without).send(&server).await,
        "prompts:use",
    );
    assert_eq!(ran.count("greet"), 0);
    let refused = complete(greet.clone(), "name", &without)
        .send(&server)
        .await;
    assert_insufficient("complete greet", &refused, "prompts:use");
    assert_eq!(ran.count("complete greet"), 0);
    let refused = complete(orders.clone(), "id", &without).send(&server).await;
    assert_insufficient("complete orders", &refused, "orders:read");
    assert_eq!(ran.count("complete orders"), 0);
    assert_eq!(
        listed(&server, "prompts/list", "prompts", &without).await,
        ["open"]
    );

    assert_served(
        "prompts/get",
        &get(&with).send(&server).await,
        "GetPromptResultResponse",
    );
    assert_eq!(ran.count("greet"), 1);
    let completed = complete(greet, "name", &with).send(&server).await;
    let result = assert_served("complete greet", &completed, "CompleteResultResponse");
    assert_eq!(result["completion"]["values"], json!(["alice"]));
    let completed = complete(orders, "id", &with).send(&server).await;
    let result = assert_served("complete orders", &completed, "CompleteResultResponse");
    assert_eq!(result["completion"]["values"], json!(["42"]));
    assert_eq!(
        listed(&server, "prompts/list", "prompts", &with).await,
        ["greet", "open"]
    );
}

#[tokio::test]
async fn tools_list_publishes_each_tools_own_scopes_in_meta() {
    let server = Tools::serve(
        &[
            ("export", &["report:export", "basket:read"]),
            ("anyone", &[]),
        ],
        |b, o| b.oauth(o),
    )
    .await;
    let token = server.issuer.token("alice", "basket:read report:export");
    let tools = list_all(&server.http, "tools/list", "tools", &token).await;
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert_eq!(
        tools[0]["_meta"]["io.github.mcp-tools/scopes"],
        json!(["basket:read", "report:export"]),
        "{}",
        tools[0]
    );
    assert!(
        tools[1]
            .get("_meta")
            .and_then(|m| m.get("io.github.mcp-tools/scopes"))
            .is_none(),
        "{}",
        tools[1]
    );
}

#[tokio::test]
async fn a_tool_sees_the_granted_scopes_with_the_implied_ones_and_none_without_oauth() {
    let issuer = Issuer::start().await;
    let tools = || ToolSet::new().with(GrantedScopes);
    let server = start(
        builder()
            .tools(tools())
            .oauth(oauth(&issuer).implies("basket:write", ["basket:read"])),
    )
    .await;
    let seen = call_tool(
        "granted_scopes",
        &issuer.token("alice", "extra basket:write"),
    )
    .send(&server)
    .await;
    let result = assert_served("with OAuth", &seen, "CallToolResultResponse");
    assert_eq!(
        result["content"][0]["text"],
        r#"["basket:read","basket:write","extra"]"#
    );

    let plain = start(builder().tools(tools())).await;
    let seen = Call::call_tool("granted_scopes", json!({}))
        .send(&plain)
        .await;
    let result = assert_served("without OAuth", &seen, "CallToolResultResponse");
    assert_eq!(result["content"][0]["text"], "null");
}

/// The basket server behind `verifier`, trusting `issuers`.
fn basket_server(verifier: impl TokenVerifier, issuers: &[&Issuer]) -> McpServer {
    let oauth = issuers
        .iter()
        .fold(OAuth::new(RESOURCE, verifier), |oauth, issuer| {
            oauth.authorization_server(&issuer.url)
        });
    builder()
        .tools(basket::tool_set())
        .store(MemoryStore::default())
        .oauth(oauth)
        .build()
        .unwrap()
}

const BASKET_SCOPES: &str = "basket:read basket:write";

/// Asserts `theirs` cannot read, change or replay into `owner`'s basket, nor get its outcome
/// back by reusing its operation ids; `owner` sees its basket unchanged.
async fn assert_isolated(owner: &Agent, theirs: &Agent) {
    let create_id = operation_id("create");
    let created = owner
        .call("basket_create", json!({ "operation_id": create_id }))
        .await;
    assert_eq!(outcome(&created), "applied", "{created}");
    let handle = created["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    let upgrade = json!({ "basket_id": handle, "expected_version": 1,
        "operation_id": operation_id("upgrade"), "memory_gib": 32 });
    let upgraded = owner.call("basket_upgrade_memory", upgrade.clone()).await;
    assert_eq!(outcome(&upgraded), "applied", "{upgraded}");

    let read = theirs
        .call("basket_get", json!({ "basket_id": handle }))
        .await;
    assert_eq!(read["structuredContent"]["code"], "NOT_FOUND", "{read}");
    let unknown = theirs
        .call(
            "basket_get",
            json!({ "basket_id": "bsk_AAAAAAAAAAAAAAAAAAAAAAAAAAA" }),
        )
        .await;
    assert_eq!(
        read, unknown,
        "another's basket answers like an unknown one"
    );
    let change = json!({ "basket_id": handle, "expected_version": 2,
        "operation_id": operation_id("theirs"), "memory_gib": 64 });
    let changed = theirs.call("basket_upgrade_memory", change).await;
    assert_eq!(
        changed["structuredContent"]["code"], "NOT_FOUND",
        "{changed}"
    );
    // The owner's exact request, operation id included: not a replay of the owner's outcome.
    let replayed = theirs.call("basket_upgrade_memory", upgrade).await;
    assert_eq!(
        replayed["structuredContent"]["code"], "NOT_FOUND",
        "{replayed}"
    );

    let reused = theirs
        .call("basket_create", json!({ "operation_id": create_id }))
        .await;
    assert_eq!(outcome(&reused), "applied", "{reused}");
    assert_ne!(
        reused["structuredContent"]["handle"],
        json!(handle),
        "{reused}"
    );
    assert!(!reused.to_string().contains(&handle), "{reused}");

    let (version, state) = owner.get(&handle).await;
    assert_eq!((version, &state["memory_gib"]), (2, &json!(32)));
}

#[tokio::test]
async fn another_subject_of_the_same_issuer_cannot_reach_a_basket() {
    let issuer = Issuer::start().await;
    let verifier = JwtVerifier::with_jwks(&issuer.url, &issuer.jwks_url()).unwrap();
    let server = TestServer::start(basket_server(verifier, &[&issuer])).await;
    let alice = Agent::connect(&server.url(), Some(&issuer.token("alice", BASKET_SCOPES))).await;
    let bob = Agent::connect(&server.url(), Some(&issuer.token("bob", BASKET_SCOPES))).await;
    within("isolating alice from bob", assert_isolated(&alice, &bob)).await;
}

/// Accepts what any of its verifiers accepts, as a server trusting several issuers does.
struct AnyOf(Vec<JwtVerifier>);

impl TokenVerifier for AnyOf {
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a> {
        Box::pin(async move {
            let mut refusal = TokenRejection::Invalid("no verifier".into());
            for verifier in &self.0 {
                match verifier.verify(token).await {
                    Ok(verified) => return Ok(verified),
                    Err(rejection) => refusal = rejection,
                }
            }
            Err(refusal)
        })
    }
}

#[tokio::test]
async fn the_same_subject_from_another_issuer_is_another_principal() {
    // Both issuers sign with the same key, so only `iss` tells their tokens apart.
    let (first, second) = (Issuer::start().await, Issuer::start().await);
    let verifier = AnyOf(
        [&first, &second]
            .iter()
            .map(|issuer| JwtVerifier::with_jwks(&issuer.url, &issuer.jwks_url()).unwrap())
            .collect(),
    );
    let server = TestServer::start(basket_server(verifier, &[&first, &second])).await;
    let here = Agent::connect(&server.url(), Some(&first.token("alice", BASKET_SCOPES))).await;
    let there = Agent::connect(&server.url(), Some(&second.token("alice", BASKET_SCOPES))).await;
    within(
        "isolating alice of one issuer from alice of the other",
        async {
            assert_isolated(&here, &there).await;
            assert_isolated(&there, &here).await;
        },
    )
    .await;
}

#[tokio::test]
async fn a_resource_update_reaches_only_the_listeners_whose_token_may_read_it() {
    let issuer = Issuer::start().await;
    let ran = Ran::default();
    let server = builder()
        .resources(scoped_resources(&ran))
        .oauth(oauth(&issuer))
        .build()
        .unwrap();
    let handle = server.clone();
    let server = TestServer::start(server).await;
    let listen = |token: &str| {
        bearer(
            Call::new(
                "subscriptions/listen",
                json!(9),
                json!({ "notifications": {
                    "resourceSubscriptions": ["basket://catalog", "basket://public"]
                } }),
            ),
            token,
        )
    };
    let url = server.url();
    let mut reader = Events::open(&url, &listen(&issuer.token("ann", "basket:read"))).await;
    let mut stranger = Events::open(&url, &listen(&issuer.token("bob", ""))).await;
    for events in [&mut reader, &mut stranger] {
        let ack = events.next().await;
        assert_conforms("SubscriptionsAcknowledgedNotification", &ack);
    }
    handle.notify_resource_updated("basket://catalog");
    handle.notify_resource_updated("basket://public");
    let first = reader.next().await;
    assert_conforms("ResourceUpdatedNotification", &first);
    assert_eq!(first["params"]["uri"], "basket://catalog");
    assert_eq!(reader.next().await["params"]["uri"], "basket://public");
    // Updates are delivered in order, so the stranger's first one shows the catalog's was held back.
    let first = stranger.next().await;
    assert_conforms("ResourceUpdatedNotification", &first);
    assert_eq!(first["params"]["uri"], "basket://public");
}

#[tokio::test]
async fn updates_to_unlisted_uris_and_default_scoped_resources_reach_only_who_may_read_them() {
    let issuer = Issuer::start().await;
    let ran = Ran::default();
    let server = builder()
        .tools(ToolSet::new().with(WhoAmI))
        .resources(scoped_resources(&ran))
        .oauth(oauth(&issuer).default_scopes(["mcp:use"]))
        .build()
        .unwrap();
    let handle = server.clone();
    let server = TestServer::start(server).await;
    let listen = |token: &str| {
        bearer(
            Call::new(
                "subscriptions/listen",
                json!(9),
                json!({ "notifications": {
                    "toolsListChanged": true,
                    "resourceSubscriptions": ["basket://catalog", "basket://public", "basket://drafts"]
                } }),
            ),
            token,
        )
    };
    let url = server.url();
    let mut listeners = [
        ("ann", "basket:read mcp:use"),
        ("bob", "mcp:use"),
        ("eve", ""),
    ]
    .map(|(name, scopes)| (name, issuer.token(name, scopes)));
    let mut streams = Vec::new();
    for (name, token) in &mut listeners {
        let mut events = Events::open(&url, &listen(token)).await;
        let ack = events.next().await;
        assert_conforms("SubscriptionsAcknowledgedNotification", &ack);
        streams.push((*name, events));
    }
    // Under the catalog (which needs `basket:read`) though no resource lists it; a resource of no
    // scopes of its own, so of the default ones; a URI no resource or template names, so of the
    // default scopes too; then the tool list, which every listener hears and so closes what
    // each was told.
    handle.notify_resource_updated("basket://catalog/items/7");
    handle.notify_resource_updated("basket://public");
    handle.notify_resource_updated("basket://drafts/3");
    handle.notify_tools_changed();
    for (name, mut events) in streams {
        let mut heard = Vec::new();
        loop {
            let event = events.next().await;
            match event["params"]["uri"].as_str() {
                Some(uri) => heard.push(uri.to_owned()),
                None => break,
            }
        }
        let expected: &[&str] = match name {
            "ann" => &[
                "basket://catalog/items/7",
                "basket://public",
                "basket://drafts/3",
            ],
            "bob" => &["basket://public", "basket://drafts/3"],
            _ => &[],
        };
        assert_eq!(heard, expected, "what {name} heard");
    }
}

/// Returns the caller's principal key.
struct WhoAmI;

impl Tool for WhoAmI {
    type Args = NoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("whoami", "Names the caller.")
    }
    async fn call(&self, _args: NoArgs, cx: Context) -> String {
        cx.principal().key().to_owned()
    }
}

#[tokio::test]
async fn an_authenticate_check_after_oauth_may_refuse_but_not_rename_the_caller() {
    let issuer = Issuer::start().await;
    let server = builder()
        .tools(ToolSet::new().with(WhoAmI))
        .oauth(oauth(&issuer))
        .authenticate(|headers| {
            if headers.contains_key("x-banned") {
                Err(mcp_tools::auth::Unauthorized::insufficient_scope(
                    "Bearer error=\"insufficient_scope\"",
                    "This account is suspended",
                ))
            } else {
                Ok(mcp_tools::auth::Principal::subject("someone-else"))
            }
        })
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let token = issuer.token("ann", "");
    let served = call_tool("whoami", &token).send(&server).await;
    let result = assert_served("whoami", &served, "CallToolResultResponse");
    assert_eq!(
        result["content"][0]["text"],
        format!("{}#ann", issuer.url),
        "the token decides the principal"
    );
    let vetoed = call_tool("whoami", &token)
        .header("x-banned", "1")
        .send(&server)
        .await;
    assert_eq!(vetoed.status, 403, "{}", vetoed.text);
    assert_eq!(
        vetoed.headers["www-authenticate"],
        "Bearer error=\"insufficient_scope\""
    );
    assert_conforms("JSONRPCErrorResponse", &vetoed.json());
    // A bad token is refused before the check runs, with the resource server's challenge.
    let unverified = call_tool("whoami", "not-a-token")
        .header("x-banned", "1")
        .send(&server)
        .await;
    assert_eq!(unverified.status, 401, "{}", unverified.text);
}
