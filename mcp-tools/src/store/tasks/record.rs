//! A task's durable record: what every store keeps, the transitions every replica applies to it
//! under the store's lock, and its wire forms.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::store::clock::format_rfc3339;
use crate::store::depth::deeper_than;
use crate::store::error::StoreError;

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// The tool is running.
    Working,
    /// The tool waits for the client's answers to `inputRequests`.
    InputRequired,
    /// The tool returned a result (an error result included).
    Completed,
    /// The task ended in a protocol error: the tool panicked, its replica stopped, or it could
    /// not ask for what it needed.
    Failed,
    /// The client cancelled the task.
    Cancelled,
}

impl TaskStatus {
    /// Whether the status never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// How deep a completed task's result may nest arrays and objects. The SQL stores keep a record
/// as one JSON document, and `tasks/get` answers with the result two levels down in its
/// message; both are read by parsers that commonly stop at 127 levels (serde_json's does). A
/// stateful tool's answer nests its state (at most [`MAX_DEPTH`](crate::store::MAX_DEPTH)) four
/// levels down at most, so it fits unless a view nests deeper than its state.
const RESULT_DEPTH: usize = 125;

/// How deep one of a task's input requests may nest: `tasks/get` carries it a level further
/// down than a result (`inputRequests`, then its key).
const REQUEST_DEPTH: usize = RESULT_DEPTH - 1;

/// One task, as a store keeps it. Stores treat it as an opaque document with a few keys
/// ([`id`](Self::id), [`owner`](Self::owner), [`operation_key`](Self::operation_key),
/// [`expires_at_ms`](Self::expires_at_ms)); the runtime alone changes it, through a
/// [`TaskChange`](crate::tasks::TaskChange).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub(crate) id: String,
    pub(crate) owner: String,
    pub(crate) tool: String,
    /// The tool name and the caller's `operation_id`, when the call carried one: a retry with
    /// the same key gets this task back.
    pub(crate) operation: Option<String>,
    /// The arguments' fingerprint, to tell an honest retry from a reused operation id.
    pub(crate) fingerprint: Option<String>,
    pub(crate) status: TaskStatus,
    pub(crate) status_message: Option<String>,
    pub(crate) created_at_ms: u64,
    pub(crate) updated_at_ms: u64,
    pub(crate) ttl_ms: u64,
    pub(crate) poll_interval_ms: u64,
    /// The outstanding input requests, by wire key.
    pub(crate) input_requests: Map<String, Value>,
    /// Answers delivered by `tasks/update` that the worker has not taken yet, by wire key.
    pub(crate) input_responses: Map<String, Value>,
    pub(crate) result: Option<Value>,
    pub(crate) error: Option<Value>,
    /// The replica running the tool, and until when its lease holds.
    pub(crate) worker: String,
    pub(crate) lease_until_ms: u64,
}

impl TaskRecord {
    /// The task id (server-minted, unguessable).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key of the principal that created it (empty for the anonymous principal).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The tool name and operation id the task was created with, if any: unique per owner.
    pub fn operation_key(&self) -> Option<&str> {
        self.operation.as_deref()
    }

    /// When the task's time to live ends, in milliseconds since the Unix epoch; after it the
    /// record may be deleted.
    pub fn expires_at_ms(&self) -> u64 {
        self.created_at_ms.saturating_add(self.ttl_ms)
    }

    /// When the task was made, in milliseconds since the Unix epoch.
    pub fn created_at_ms(&self) -> u64 {
        self.created_at_ms
    }

    /// The record as bytes, for a store's document column.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a task record is plain JSON")
    }

    /// A record from bytes [`encode`](Self::encode) produced.
    pub fn decode(bytes: &[u8]) -> Result<TaskRecord, StoreError> {
        serde_json::from_slice(bytes)
            .map_err(|error| StoreError::Backend(format!("unreadable task record: {error}")))
    }

    /// Where the task stands.
    pub fn status(&self) -> TaskStatus {
        self.status
    }

    /// A working task of `owner` made at `created_at_ms` living `ttl_ms`, for the tests of a
    /// store.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn for_tests(id: &str, owner: &str, created_at_ms: u64, ttl_ms: u64) -> TaskRecord {
        TaskRecord {
            id: id.to_owned(),
            owner: owner.to_owned(),
            tool: "tool".to_owned(),
            operation: None,
            fingerprint: None,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms,
            updated_at_ms: created_at_ms,
            ttl_ms,
            poll_interval_ms: 100,
            input_requests: Map::new(),
            input_responses: Map::new(),
            result: None,
            error: None,
            worker: "tests".to_owned(),
            lease_until_ms: created_at_ms.saturating_add(1_000),
        }
    }

    /// What tells one state of the task from the next, for those who follow it.
    pub(crate) fn revision(&self) -> Revision {
        (self.status, self.updated_at_ms, self.input_requests.len())
    }

    /// Whether the caller keyed `owner` may see the task at `now`: its own, within its TTL.
    pub(crate) fn visible_to(&self, owner: &str, now_ms: u64) -> bool {
        self.owner == owner && now_ms < self.expires_at_ms()
    }

    /// A task still open whose worker stopped renewing its lease.
    pub(crate) fn lease_lapsed(&self, now_ms: u64) -> bool {
        !self.status.is_terminal() && self.lease_until_ms < now_ms
    }

    fn touch(&mut self, now_ms: u64) {
        self.updated_at_ms = self.updated_at_ms.max(now_ms);
    }

    /// Ends an open task; a terminal one never changes. Whether it changed.
    pub(crate) fn end(&mut self, end: Ending, now_ms: u64) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        let end = match end {
            Ending::Completed(result) if deeper_than(&result, RESULT_DEPTH) => Ending::Failed {
                code: crate::protocol::codes::INTERNAL_ERROR,
                message: format!(
                    "The tool's result nests arrays and objects more than {RESULT_DEPTH} levels \
                     deep, more than a task keeps; report it to the server's operator"
                ),
            },
            end => end,
        };
        let (status, message, result, error) = match end {
            Ending::Completed(result) => (TaskStatus::Completed, None, Some(result), None),
            Ending::Failed { code, message } => {
                let error = json!({ "code": code, "message": message });
                (TaskStatus::Failed, Some(message), None, Some(error))
            }
            Ending::Cancelled => (
                TaskStatus::Cancelled,
                Some("Cancelled by the client".to_owned()),
                None,
                None,
            ),
        };
        self.status = status;
        self.status_message = message;
        self.result = result;
        self.error = error;
        self.input_requests.clear();
        self.input_responses.clear();
        self.touch(now_ms);
        true
    }

    /// Fails a task whose worker's lease lapsed. Whether it changed.
    pub(crate) fn expire_lease(&mut self, now_ms: u64) -> bool {
        self.lease_lapsed(now_ms)
            && self.end(
                Ending::Failed {
                    code: crate::protocol::codes::INTERNAL_ERROR,
                    message: "The replica running this task stopped before it finished (its lease \
                              expired); call the tool again, with a new operation_id if it takes one"
                        .to_owned(),
                },
                now_ms,
            )
    }

    /// Delivers the client's answers to outstanding requests; answers to anything else are
    /// ignored. Once nothing is outstanding the task is working again. Whether it changed.
    pub(crate) fn deliver(&mut self, responses: &Map<String, Value>, now_ms: u64) -> bool {
        if self.status != TaskStatus::InputRequired {
            return false;
        }
        let mut changed = false;
        for (key, response) in responses {
            if self.input_requests.remove(key).is_some() {
                self.input_responses.insert(key.clone(), response.clone());
                changed = true;
            }
        }
        if changed {
            if self.input_requests.is_empty() {
                self.status = TaskStatus::Working;
                self.status_message = None;
            }
            self.touch(now_ms);
        }
        changed
    }

    /// The worker asks the client for input. Whether it changed (an ended task does not).
    /// Requests nested past what the task's readers parse fail the task instead, as a result
    /// would; its worker then stops at its next heartbeat.
    pub(crate) fn park(&mut self, requests: Map<String, Value>, now_ms: u64) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        if requests
            .values()
            .any(|request| deeper_than(request, REQUEST_DEPTH))
        {
            let message = format!(
                "The tool asked for input nested more than {REQUEST_DEPTH} levels deep, more \
                 than a task keeps; report it to the server's operator"
            );
            let code = crate::protocol::codes::INTERNAL_ERROR;
            return self.end(Ending::Failed { code, message }, now_ms);
        }
        self.status = TaskStatus::InputRequired;
        self.status_message = Some("Waiting for the client's input".to_owned());
        self.input_requests = requests;
        self.input_responses.clear();
        self.touch(now_ms);
        true
    }

    /// The answers delivered for this round, as `worker` reads them on its heartbeat: none for
    /// a task that ended or that another worker holds. They stay until the next round or the
    /// end (keys are never reused, so reading one twice is harmless, and a heartbeat that
    /// failed loses none).
    pub(crate) fn answers_for(&self, worker: &str) -> Map<String, Value> {
        if self.status.is_terminal() || self.worker != worker {
            return Map::new();
        }
        self.input_responses.clone()
    }

    /// Whether `worker` holds this open task's lease and less than `due_ms` is left of it:
    /// only then does a heartbeat write, so most heartbeats are reads.
    pub(crate) fn lease_due(&self, worker: &str, due_ms: u64) -> bool {
        !self.status.is_terminal() && self.worker == worker && self.lease_until_ms < due_ms
    }

    /// Extends `worker`'s lease to `lease_until_ms`; `false` (nothing to write) for a task
    /// that ended or that another worker holds.
    pub(crate) fn renew(&mut self, worker: &str, lease_until_ms: u64) -> bool {
        if self.status.is_terminal() || self.worker != worker {
            return false;
        }
        self.lease_until_ms = self.lease_until_ms.max(lease_until_ms);
        true
    }

    /// The `Task` members every form shares.
    fn task_members(&self) -> Map<String, Value> {
        let mut task = Map::new();
        task.insert("taskId".into(), json!(self.id));
        task.insert("status".into(), json!(self.status.as_str()));
        if let Some(message) = &self.status_message {
            task.insert("statusMessage".into(), json!(message));
        }
        task.insert("createdAt".into(), json!(rfc3339(self.created_at_ms)));
        task.insert("lastUpdatedAt".into(), json!(rfc3339(self.updated_at_ms)));
        task.insert("ttlMs".into(), json!(self.ttl_ms));
        task.insert("pollIntervalMs".into(), json!(self.poll_interval_ms));
        task
    }

    /// The `CreateTaskResult` body, without `resultType`.
    pub(crate) fn created(&self) -> Map<String, Value> {
        self.task_members()
    }

    /// The `DetailedTask`: the task, plus what its status carries (`inputRequests`, `result` or
    /// `error`).
    pub(crate) fn detailed(&self) -> Map<String, Value> {
        let mut task = self.task_members();
        match self.status {
            TaskStatus::InputRequired => {
                task.insert(
                    "inputRequests".into(),
                    Value::Object(self.input_requests.clone()),
                );
            }
            TaskStatus::Completed => {
                if let Some(result) = &self.result {
                    task.insert("result".into(), result.clone());
                }
            }
            TaskStatus::Failed => {
                if let Some(error) = &self.error {
                    task.insert("error".into(), error.clone());
                }
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        task
    }
}

/// A task's status, last update and outstanding request count: a change of any is news.
pub(crate) type Revision = (TaskStatus, u64, usize);

/// How a task ends.
#[derive(Clone)]
pub(crate) enum Ending {
    Completed(Value),
    Failed { code: i32, message: String },
    Cancelled,
}

fn rfc3339(ms: u64) -> String {
    format_rfc3339(i64::try_from(ms).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> TaskRecord {
        TaskRecord {
            id: "tsk_1".into(),
            owner: "alice".into(),
            tool: "slow".into(),
            operation: None,
            fingerprint: None,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: 1_000,
            updated_at_ms: 1_000,
            ttl_ms: 60_000,
            poll_interval_ms: 500,
            input_requests: Map::new(),
            input_responses: Map::new(),
            result: None,
            error: None,
            worker: "a".into(),
            lease_until_ms: 5_000,
        }
    }

    #[test]
    fn a_terminal_task_never_changes() {
        let mut task = record();
        assert!(task.end(Ending::Cancelled, 2_000));
        assert!(!task.end(Ending::Completed(json!({})), 3_000));
        assert!(!task.park(Map::new(), 3_000));
        assert!(!task.expire_lease(10_000));
        assert_eq!(task.status, TaskStatus::Cancelled);
        assert_eq!(task.updated_at_ms, 2_000);
    }

    #[test]
    fn partial_answers_keep_the_task_waiting_for_the_rest() {
        let mut task = record();
        let mut requests = Map::new();
        requests.insert("a".into(), json!({}));
        requests.insert("b".into(), json!({}));
        assert!(task.park(requests, 2_000));
        let mut answers = Map::new();
        answers.insert("a".into(), json!(1));
        answers.insert("stray".into(), json!(2));
        assert!(task.deliver(&answers, 2_500));
        assert_eq!(task.status, TaskStatus::InputRequired);
        assert_eq!(task.input_requests.keys().collect::<Vec<_>>(), ["b"]);
        assert!(!task.input_responses.contains_key("stray"));
        let mut rest = Map::new();
        rest.insert("b".into(), json!(3));
        assert!(task.deliver(&rest, 2_600));
        assert_eq!(task.status, TaskStatus::Working);
        assert_eq!(task.answers_for("a").len(), 2);
        assert_eq!(
            task.answers_for("a").len(),
            2,
            "answers stay until the next round"
        );
        assert!(task.answers_for("b").is_empty(), "b holds no lease");
        assert!(task.park(Map::new(), 9_500));
        assert!(
            task.answers_for("a").is_empty(),
            "a new round starts with no answers"
        );
    }

    /// A live worker polling every `poll_ms` for `polls` polls after its lease was written at
    /// 0, deciding as the worker does: when it writes the lease, and the least it has left.
    fn heartbeats(lease_ms: u64, poll_ms: u64, polls: u64) -> (Vec<u64>, u64) {
        let options = crate::tasks::TaskOptions::default()
            .lease(std::time::Duration::from_millis(lease_ms))
            .poll_interval(std::time::Duration::from_millis(poll_ms));
        let mut task = record();
        task.lease_until_ms = lease_ms;
        let (mut writes, mut least) = (Vec::new(), u64::MAX);
        for now in (1..=polls).map(|k| k * poll_ms) {
            assert!(
                !task.lease_lapsed(now),
                "the lease lapsed before the poll at {now} ms"
            );
            least = least.min(task.lease_until_ms - now);
            if task.lease_due("a", options.renewal_due(now)) {
                assert!(task.renew("a", now + lease_ms));
                writes.push(now);
            }
        }
        (writes, least)
    }

    #[test]
    fn a_live_worker_writes_its_lease_twice_per_lease_and_never_lets_it_run_short() {
        // The defaults: a 10 s lease and a poll every 500 ms, for 50 s.
        let (writes, least) = heartbeats(10_000, 500, 100);
        assert_eq!(writes, (1..=10).map(|k| k * 5_000).collect::<Vec<_>>());
        assert_eq!(least, 5_000, "half a lease is always left");
        // A lease of 1.5 s, a poll every 250 ms: a write every third poll.
        let (writes, least) = heartbeats(1_500, 250, 12);
        assert_eq!(writes, [750, 1_500, 2_250, 3_000]);
        assert_eq!(least, 750);
        // The shortest lease allowed, two polls: a write at every poll, a poll's worth left.
        let (writes, least) = heartbeats(1_000, 500, 8);
        assert_eq!(writes.len(), 8);
        assert_eq!(least, 500);
    }

    #[test]
    fn only_the_holder_renews_and_a_lapsed_lease_fails_the_task() {
        let mut task = record();
        assert!(!task.lease_due("b", 9_000));
        assert!(!task.renew("b", 9_000));
        assert_eq!(task.lease_until_ms, 5_000);
        assert!(!task.lease_due("a", 5_000), "5 s are left: not due yet");
        assert!(task.lease_due("a", 5_001));
        let mut renewed = task.clone();
        assert!(renewed.renew("a", 9_000));
        assert_eq!(renewed.lease_until_ms, 9_000);
        assert!(renewed.renew("a", 8_000));
        assert_eq!(renewed.lease_until_ms, 9_000, "a lease never shrinks");
        assert!(!task.expire_lease(5_000), "the lease holds up to its end");
        assert!(task.expire_lease(5_001));
        assert_eq!(task.status, TaskStatus::Failed);
        assert_eq!(task.error.as_ref().unwrap()["code"], json!(-32603));
    }

    #[test]
    fn visibility_is_the_owner_within_the_ttl() {
        let task = record();
        assert!(task.visible_to("alice", 60_999));
        assert!(!task.visible_to("alice", 61_000));
        assert!(!task.visible_to("bob", 2_000));
    }

    /// A result within the nesting bound is kept, and reads back from its encoding and from
    /// the `tasks/get` message that carries it; a deeper one, which would not, fails the task
    /// instead.
    #[test]
    fn a_result_past_the_nesting_bound_fails_the_task() {
        let nested = |levels: usize| (0..levels).fold(json!(1), |inner, _| json!([inner]));
        // A replay's answer, around a state at the stores' bound.
        let replayed = json!({ "structuredContent": { "current": { "state": {
            "body": nested(crate::store::MAX_DEPTH - 1)
        } } } });
        // The result's own object is one level.
        let at_bound = json!({ "structuredContent": nested(RESULT_DEPTH - 1) });
        for result in [replayed, at_bound] {
            let mut kept = record();
            kept.end(Ending::Completed(result), 2_000);
            assert_eq!(kept.status, TaskStatus::Completed);
            assert_eq!(TaskRecord::decode(&kept.encode()).unwrap(), kept);
            let message = json!({ "jsonrpc": "2.0", "id": 1, "result": kept.detailed() });
            let read: Value = serde_json::from_str(&message.to_string()).unwrap();
            assert_eq!(read, message);
        }
        let mut failed = record();
        failed.end(
            Ending::Completed(json!({ "structuredContent": nested(RESULT_DEPTH) })),
            2_000,
        );
        assert_eq!(failed.status, TaskStatus::Failed);
        assert!(failed.result.is_none());
        assert_eq!(failed.error.as_ref().unwrap()["code"], json!(-32603));
        assert_eq!(TaskRecord::decode(&failed.encode()).unwrap(), failed);
    }

    #[test]
    fn the_detailed_form_carries_what_the_status_has() {
        let mut task = record();
        assert!(task.detailed().get("result").is_none());
        task.end(Ending::Completed(json!({ "content": [] })), 2_000);
        let detailed = task.detailed();
        assert_eq!(detailed["status"], "completed");
        assert_eq!(detailed["result"], json!({ "content": [] }));
        assert_eq!(detailed["ttlMs"], 60_000);
        assert!(task.created().get("result").is_none());
    }
}
