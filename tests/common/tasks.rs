//! Requests of the Tasks extension, and polling a task until it reaches a status.

use std::future::Future;
use std::time::Duration;

use mcp_tools::tasks::TASKS_EXTENSION;
use serde_json::{Value, json};

use super::{Call, within};

/// Client capabilities that take tasks and can answer elicitations.
pub fn taking_tasks() -> Value {
    json!({ "extensions": { TASKS_EXTENSION: {} }, "elicitation": {} })
}

/// A `tools/call` from a client that takes tasks.
pub fn tool_call(name: &str, arguments: Value) -> Call {
    Call::call_tool(name, arguments).capabilities(taking_tasks())
}

/// `method` (`tasks/get`, `tasks/update`, `tasks/cancel`) on task `id`, `extra` merged into
/// its params, with the `Mcp-Name` header the extension requires.
pub fn method_call(method: &str, id: &str, extra: Value) -> Call {
    let mut params = json!({ "taskId": id });
    if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
        params.extend(extra);
    }
    Call::new(method, json!(3), params)
        .header("mcp-name", id)
        .capabilities(taking_tasks())
}

/// Reads the task with `read` every `poll` until its status is `status`, failing the test if
/// it ends in another status first or takes longer than a step.
pub async fn until_status<F: Future<Output = Value>>(
    status: &str,
    poll: Duration,
    mut read: impl FnMut() -> F,
) -> Value {
    within("the task to reach its status", async {
        loop {
            let task = read().await;
            if task["status"] == status {
                return task;
            }
            assert!(
                !["completed", "failed", "cancelled"].contains(&task["status"].as_str().unwrap()),
                "the task ended as {task} while {status} was awaited"
            );
            tokio::time::sleep(poll).await;
        }
    })
    .await
}

/// Sends `call` to `url` every `poll` while a running-task cap refuses it (429), and returns
/// the first accepted reply; any other answer fails the test, as does a step's wait.
pub async fn until_accepted(url: &str, call: &Call, poll: Duration) -> super::Reply {
    within("a place to free up under the running-task caps", async {
        loop {
            let reply = call.send_to(url).await;
            if reply.status == 200 {
                return reply;
            }
            assert_eq!(reply.status, 429, "{}", reply.text);
            tokio::time::sleep(poll).await;
        }
    })
    .await
}

/// Asserts `task` failed because the replica running it shut down.
pub fn assert_shut_down(task: &Value) {
    assert_eq!(task["status"], "failed", "{task}");
    let message = task["statusMessage"].as_str().unwrap_or_default();
    assert!(message.contains("shut down"), "{task}");
}
