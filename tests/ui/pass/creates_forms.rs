use std::sync::Arc;

use mcp_tools::store::Entity;
use mcp_tools::{Context, State, ToolError, tool, tools};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "tkt")]
struct Ticket {
    owner: String,
    seats: u32,
}

#[derive(Clone, Default)]
struct Office {
    name: String,
}

/// Issues a ticket to the caller, taking the office from the server's state.
#[tool(creates = Ticket)]
async fn ticket_issue(
    office: State<Office>,
    cx: &Context,
    #[arg(default = 1)] seats: u32,
) -> Result<Ticket, ToolError> {
    let _ = cx.principal();
    Ok(Ticket {
        owner: office.name.clone(),
        seats,
    })
}

/// Issues a ticket, synchronously, with the context by value.
#[tool(creates = Ticket)]
fn ticket_issue_now(cx: Context, note: Option<String>) -> Ticket {
    let _ = (cx, note);
    Ticket {
        owner: String::new(),
        seats: 1,
    }
}

struct Box_ {
    prefix: String,
}

#[mcp_tools::toolbox]
impl Box_ {
    /// Issues a ticket from the box office.
    #[tool(creates = Ticket)]
    async fn issue(&self, cx: &Context, #[arg(default)] seats: u32) -> Ticket {
        let _ = cx;
        Ticket {
            owner: self.prefix.clone(),
            seats,
        }
    }

    /// Issues a ticket without an idempotency key.
    #[tool(creates = Ticket, operation_id = false)]
    fn issue_once(&self) -> Result<Ticket, ToolError> {
        Ok(Ticket {
            owner: self.prefix.clone(),
            seats: 1,
        })
    }
}

fn main() {
    let set = tools![ticket_issue, ticket_issue_now]
        .merge(Arc::new(Box_ { prefix: "b".into() }).tool_set());
    assert_eq!(set.len(), 4);
}
