//! Running tasks on this replica: the worker that drives a tool's future, renews its lease and
//! picks up input and cancellations from the store; the running-task limits; the purge.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::context::{Context, RoundInput, TaskSlot};
use crate::protocol::error::RpcError;
use crate::protocol::framework::code;
use crate::protocol::input::InputRequired;
use crate::protocol::reply::Reply;
use crate::protocol::tool_error::ToolError;
use crate::store::StoreError;
use crate::store::tasks::record::Ending;
use crate::tasks::{TaskChange, TaskInsert, TaskOptions, TaskRecord, TaskStatus, TaskStore};
use crate::tools::BoxFuture;
// The running counts change by counting up and down, which does not panic halfway.
use crate::sync::lock;

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The tasks of one server.
pub(crate) struct Tasks {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) options: TaskOptions,
    /// This replica's name on the leases it holds.
    replica: String,
    running: Mutex<Running>,
    /// The workers running here, woken when a request on this replica changed their task.
    local: Mutex<HashMap<String, Arc<Notify>>>,
    purging: AtomicBool,
    /// Notified each time a running task ends here.
    ended: Notify,
}

#[derive(Default)]
struct Running {
    total: usize,
    by_owner: HashMap<String, usize>,
}

/// A running task's place under the limits, given back when the worker ends.
pub(crate) struct Permit {
    tasks: Arc<Tasks>,
    owner: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut running = lock(&self.tasks.running);
        running.total -= 1;
        if let Some(count) = running.by_owner.get_mut(&self.owner) {
            *count -= 1;
            if *count == 0 {
                running.by_owner.remove(&self.owner);
            }
        }
        drop(running);
        self.tasks.ended.notify_waiters();
    }
}

/// What a task's tool asks through its context, answered by the worker.
pub(crate) struct Ask {
    input: InputRequired,
    reply: oneshot::Sender<Result<Map<String, Value>, ToolError>>,
}

/// The tie between a running tool's context and its worker.
pub(crate) struct TaskLink {
    asks: mpsc::UnboundedSender<Ask>,
}

impl TaskLink {
    /// Makes `cx` the context of task `id`; what its tool asks arrives on the receiver.
    pub(crate) fn attach(cx: &Context, id: &str) -> mpsc::UnboundedReceiver<Ask> {
        let (asks, receiver) = mpsc::unbounded_channel();
        cx.attach_task(TaskSlot {
            id: Arc::from(id),
            link: Arc::new(TaskLink { asks }),
        });
        receiver
    }

    /// Asks the client for input and waits for every answer.
    pub(crate) async fn ask(&self, input: InputRequired) -> Result<Map<String, Value>, ToolError> {
        let (reply, answer) = oneshot::channel();
        let gone = || ToolError::new(code::TASK_ENDED, "The task ended before its input arrived");
        self.asks.send(Ask { input, reply }).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

impl Context {
    /// Asks the client for input while running as a task, and waits for every answer: the
    /// task shows `input_required` with these requests until the client answers them all with
    /// `tasks/update`, on any replica. The answers come back under the keys `input` used.
    ///
    /// Outside a task there is no one to wait for: the error says to return `input` instead
    /// (a multi-round `input_required` result). It also fails when the client did not declare
    /// the capabilities the requests need, and when the task ends first.
    pub async fn ask(&self, input: InputRequired) -> Result<Map<String, Value>, ToolError> {
        let link = self
            .task_slot()
            .and_then(|slot| slot.link.downcast_ref::<TaskLink>());
        match link {
            Some(link) => link.ask(input).await,
            None => Err(ToolError::new(
                code::INPUT_UNAVAILABLE,
                "This call is not running as a task, so it cannot wait for input; return the \
                 InputRequired instead and read the answers from the retry",
            )),
        }
    }
}

/// Starts the tool again with a multi-round answer: what a tool that returned
/// [`InputRequired`] as a task gets once the client answered.
pub(crate) type Restart = Arc<dyn Fn(Context) -> BoxFuture<'static, Reply> + Send + Sync>;

/// A tool's future, with a panic turned into a value.
pub(crate) type ToolRun = BoxFuture<'static, std::thread::Result<Reply>>;

impl Tasks {
    pub(crate) fn new(store: Arc<dyn TaskStore>, options: TaskOptions) -> Arc<Tasks> {
        let mut name = [0u8; 8];
        // A replica without randomness still runs; its leases are told apart by time.
        let _ = getrandom::fill(&mut name);
        let replica = name.iter().map(|byte| format!("{byte:02x}")).collect();
        Arc::new(Tasks {
            store,
            options,
            replica,
            running: Mutex::new(Running::default()),
            local: Mutex::new(HashMap::new()),
            purging: AtomicBool::new(false),
            ended: Notify::new(),
        })
    }

    /// A fresh, unguessable task id.
    pub(crate) fn random_id() -> Result<String, RpcError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|_| RpcError::internal("No system randomness for a task id"))?;
        let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        Ok(format!("tsk_{hex}"))
    }

    /// Milliseconds since the Unix epoch by the store's clock (the database's, for PostgreSQL),
    /// so that replicas whose clocks disagree still agree on when a task's time to live or lease
    /// ends.
    pub(crate) fn now(&self) -> u64 {
        self.store.now_millis()
    }

    /// A place for one more running task of `owner`, or the refusal at the limits.
    pub(crate) fn permit(self: &Arc<Self>, owner: &str) -> Result<Permit, RpcError> {
        let mut running = lock(&self.running);
        let of_owner = running.by_owner.get(owner).copied().unwrap_or(0);
        let wait = self.options.poll_interval.max(Duration::from_secs(1));
        if running.total >= self.options.max_running {
            return Err(RpcError::rate_limited("running tasks on this server", wait));
        }
        if of_owner >= self.options.max_running_per_principal {
            return Err(RpcError::rate_limited(
                "running tasks for this caller",
                wait,
            ));
        }
        running.total += 1;
        *running.by_owner.entry(owner.to_owned()).or_insert(0) += 1;
        Ok(Permit {
            tasks: Arc::clone(self),
            owner: owner.to_owned(),
        })
    }

    /// The record of a new task run here.
    pub(crate) fn new_record(
        &self,
        id: String,
        owner: &str,
        tool: &str,
        operation: Option<(String, String)>,
    ) -> TaskRecord {
        let now = self.now();
        let (operation, fingerprint) = operation.unzip();
        TaskRecord {
            id,
            owner: owner.to_owned(),
            tool: tool.to_owned(),
            operation,
            fingerprint,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: now,
            updated_at_ms: now,
            ttl_ms: millis(self.options.ttl),
            poll_interval_ms: millis(self.options.poll_interval).max(1),
            input_requests: Map::new(),
            input_responses: Map::new(),
            result: None,
            error: None,
            worker: self.replica.clone(),
            lease_until_ms: now.saturating_add(millis(self.options.lease)),
        }
    }

    /// Commits a new task's record, then runs its tool here in the background.
    pub(crate) async fn start(
        self: &Arc<Self>,
        record: TaskRecord,
        future: ToolRun,
        run: Worker,
    ) -> Result<TaskRecord, RpcError> {
        self.start_purging();
        match self.store.insert_task(record.clone()).await {
            Ok(TaskInsert::Inserted) => {}
            // A concurrent call with the same operation id made it first: answer with that
            // one, and drop this call's tool before it goes further.
            Ok(TaskInsert::Existing(existing)) => return Ok(*existing),
            Err(error) => return Err(unavailable(&error)),
        }
        let wake = Arc::new(Notify::new());
        lock(&self.local).insert(record.id.clone(), Arc::clone(&wake));
        let tasks = Arc::clone(self);
        let id = record.id.clone();
        tokio::spawn(async move {
            tasks.work(&id, future, run, wake).await;
            lock(&tasks.local).remove(&id);
        });
        Ok(record)
    }

    /// Wakes this replica's worker of task `id`, if it runs here.
    pub(crate) fn wake(&self, id: &str) {
        if let Some(wake) = lock(&self.local).get(id) {
            wake.notify_one();
        }
    }

    /// The task `id` as `owner` may see it, with a lapsed lease turned into `failed`; the same
    /// `-32602` for an unknown id, an expired task, and another principal's.
    pub(crate) async fn get(&self, owner: &str, id: &str) -> Result<TaskRecord, RpcError> {
        let record = self.visible(owner, id).await?;
        if !record.lease_lapsed(self.now()) {
            return Ok(record);
        }
        let now = self.now();
        let change = TaskChange::new(move |record| record.expire_lease(now));
        self.changed(id, change).await
    }

    /// Delivers the client's answers to a task's outstanding input requests.
    pub(crate) async fn update(
        &self,
        owner: &str,
        id: &str,
        responses: Map<String, Value>,
    ) -> Result<(), RpcError> {
        self.visible(owner, id).await?;
        let now = self.now();
        self.changed(
            id,
            TaskChange::new(move |record| record.deliver(&responses, now)),
        )
        .await?;
        self.wake(id);
        Ok(())
    }

    /// Cancels a task; a task that already ended stays as it is.
    pub(crate) async fn cancel(&self, owner: &str, id: &str) -> Result<(), RpcError> {
        self.visible(owner, id).await?;
        let now = self.now();
        self.changed(
            id,
            TaskChange::new(move |record| record.end(Ending::Cancelled, now)),
        )
        .await?;
        self.wake(id);
        Ok(())
    }

    async fn visible(&self, owner: &str, id: &str) -> Result<TaskRecord, RpcError> {
        self.existing(owner, id).await?.ok_or_else(|| unknown(id))
    }

    /// The task `id`, if `owner` may see it.
    pub(crate) async fn existing(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<TaskRecord>, RpcError> {
        let record = self
            .store
            .load_task(id)
            .await
            .map_err(|error| unavailable(&error))?;
        Ok(record.filter(|record| record.visible_to(owner, self.now())))
    }

    async fn changed(&self, id: &str, change: TaskChange) -> Result<TaskRecord, RpcError> {
        self.store
            .update_task(id, change)
            .await
            .map_err(|error| unavailable(&error))?
            .ok_or_else(|| unknown(id))
    }

    /// Starts the background purge once, on the first task.
    fn start_purging(self: &Arc<Self>) {
        if self.purging.swap(true, Ordering::SeqCst) {
            return;
        }
        let tasks: Weak<Tasks> = Arc::downgrade(self);
        let interval = self.options.purge_interval;
        tokio::spawn(async move {
            let mut every = tokio::time::interval(interval);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(tasks) = tasks.upgrade() else { break };
                if let Err(error) = tasks.store.purge_tasks(tasks.now()).await {
                    tracing::warn!(%error, "could not purge expired tasks; the next purge retries");
                }
            }
        });
    }

    /// Drives task `id`'s tool to its end, renewing the lease and relaying input, until the
    /// tool finishes, the task is cancelled or purged, the server shuts down, or the store
    /// fails or does not answer its heartbeats until the lease it last saw is a poll from its
    /// end (the lease then lapses and any replica fails the task, so the tool must not outlive
    /// it).
    ///
    /// The tool runs in a task of its own, so a tool that holds its thread cannot starve the
    /// heartbeats; every way out of here aborts it, which drops its future.
    async fn work(&self, id: &str, future: ToolRun, run: Worker, wake: Arc<Notify>) {
        let Worker {
            restart,
            context,
            mut asks,
            mut shutdown,
            permit: _permit,
        } = run;
        let mut tool = Some(Aborting(tokio::spawn(future)));
        let mut tick = tokio::time::interval(self.options.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut waiting: Option<Waiting> = None;
        let mut round = 0u32;
        // The end of the lease as last read: the record was inserted with a whole lease.
        let mut lease_end = self.now().saturating_add(millis(self.options.lease));
        let margin = millis(self.options.poll_interval);
        let ending = loop {
            tokio::select! {
                done = async { (&mut tool.as_mut().expect("polled while running").0).await }, if tool.is_some() => { tool = None; match done {
                    Ok(Ok(Reply::InputRequired(input))) => {
                        let state = input.state.clone();
                        match self.park(id, input, &mut round, &context).await {
                            Ok(keys) => waiting = Some(Waiting { keys, gathered: Map::new(), resume: Resume::Restart(state) }),
                            Err(ending) => break ending,
                        }
                    }
                    Ok(Ok(Reply::Complete(result))) => break Ending::Completed(
                        serde_json::to_value(&result).expect("a tool result is plain JSON"),
                    ),
                    Ok(Ok(Reply::Rendered(rendered))) => break Ending::Completed(
                        serde_json::to_value(rendered.into_call_tool_result())
                            .expect("a tool result is plain JSON"),
                    ),
                    Ok(Err(_)) | Err(_) => break Ending::Failed {
                        code: crate::protocol::codes::INTERNAL_ERROR,
                        message: "The tool panicked".to_owned(),
                    },
                }},
                Some(ask) = asks.recv(), if waiting.is_none() => {
                    match self.park(id, ask.input, &mut round, &context).await {
                        Ok(keys) => waiting = Some(Waiting { keys, gathered: Map::new(), resume: Resume::Answer(ask.reply) }),
                        Err(Ending::Failed { code, message }) if code != crate::protocol::codes::INTERNAL_ERROR => {
                            let _ = ask.reply.send(Err(ToolError::new(code::MISSING_CLIENT_CAPABILITY, message)));
                        }
                        Err(ending) => break ending,
                    }
                }
                _ = tick.tick() => {}
                () = wake.notified() => {}
                () = async { drop(shutdown.wait_for(|closing| *closing).await) } => break Ending::Failed {
                    code: crate::protocol::codes::INTERNAL_ERROR,
                    message: "The server running this task shut down before it finished; call the tool again".to_owned(),
                },
            }
            // A store that hangs must not keep the tool running past the lease: the heartbeat
            // gets only the time left before the lease's end, less a poll.
            let left = lease_end.saturating_sub(self.now().saturating_add(margin));
            let heartbeat = tokio::time::timeout(Duration::from_millis(left), self.heartbeat(id));
            let answers = match heartbeat.await {
                // Purged (its time to live ended) or ended elsewhere (cancelled, or failed
                // after a lapsed lease): aborting the tool drops its future.
                Ok(Ok(None)) => return,
                Ok(Ok(Some(record))) if record.status().is_terminal() => return,
                Ok(Ok(Some(record))) => {
                    lease_end = record.lease_until_ms;
                    record.answers_for(&self.replica)
                }
                Ok(Err(error)) if self.now().saturating_add(margin) < lease_end => {
                    tracing::warn!(%error, task = id, "could not read or renew a task; retrying at the next poll");
                    continue;
                }
                Ok(Err(error)) => {
                    tracing::error!(%error, task = id, "no heartbeat before the lease's end: stopping the task's tool; the lease lapses");
                    return;
                }
                Err(_) => {
                    tracing::error!(
                        task = id,
                        "the store did not answer a heartbeat before the lease's end: stopping the task's tool; the lease lapses"
                    );
                    return;
                }
            };
            if let Some(mut wait) = waiting.take() {
                for (wire, key) in &wait.keys {
                    if let Some(answer) = answers.get(wire) {
                        wait.gathered.insert(key.clone(), answer.clone());
                    }
                }
                if wait.gathered.len() < wait.keys.len() {
                    waiting = Some(wait);
                    continue;
                }
                match wait.resume {
                    Resume::Answer(reply) => {
                        let _ = reply.send(Ok(wait.gathered));
                    }
                    Resume::Restart(state) => {
                        let cx = context.with_round_input(RoundInput {
                            responses: wait.gathered,
                            state,
                        });
                        tool = Some(Aborting(tokio::spawn(catching(restart(cx)))));
                    }
                }
            }
        };
        drop(tool);
        // The ending is written until it sticks: a worker that gives up leaves its task to the
        // lease, which fails it later with a less precise message.
        for attempt in 0..5u32 {
            let ending = ending.clone();
            let now = self.now();
            let change = TaskChange::new(move |record| record.end(ending, now));
            match self.store.update_task(id, change).await {
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(%error, task = id, attempt, "could not record a task's end");
                    tokio::time::sleep(self.options.poll_interval).await;
                }
            }
        }
    }

    /// Waits, at most `limit`, until no task runs here: on shutdown, so each worker records
    /// how its task ended before the process exits.
    pub(crate) async fn drained(&self, limit: Duration) {
        let drained = async {
            loop {
                let ended = self.ended.notified();
                if lock(&self.running).total == 0 {
                    return;
                }
                ended.await;
            }
        };
        let _ = tokio::time::timeout(limit, drained).await;
    }

    /// One poll of the worker: reads the task, which brings answers and cancellations written
    /// on any replica, and extends the lease when [`TaskOptions::renewal_due`] says so.
    async fn heartbeat(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let now = self.now();
        match self.store.load_task(id).await? {
            Some(record) if record.lease_due(&self.replica, self.options.renewal_due(now)) => {
                let until = now.saturating_add(millis(self.options.lease));
                let worker = self.replica.clone();
                let renewal = TaskChange::new(move |record| record.renew(&worker, until));
                self.store.update_task(id, renewal).await
            }
            read => Ok(read),
        }
    }

    /// Parks the task on `input`'s requests under keys never used before in this task; the
    /// wire keys mapped to the tool's own.
    async fn park(
        &self,
        id: &str,
        input: InputRequired,
        round: &mut u32,
        context: &Context,
    ) -> Result<Vec<(String, String)>, Ending> {
        let missing = input.missing_capabilities(context.client_capabilities());
        if !missing.is_empty() {
            return Err(Ending::Failed {
                code: crate::protocol::codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
                message: format!(
                    "The tool asked for input the client did not declare it can give: {}",
                    Value::Object(missing)
                ),
            });
        }
        *round += 1;
        let mut keys = Vec::new();
        let mut requests = Map::new();
        for (key, request) in input.requests {
            let wire = format!("r{round}.{key}");
            keys.push((wire.clone(), key));
            requests.insert(wire, request);
        }
        let now = self.now();
        let change = TaskChange::new(move |record| record.park(requests, now));
        match self.store.update_task(id, change).await {
            Ok(_) => Ok(keys),
            Err(error) => Err(Ending::Failed {
                code: crate::protocol::codes::INTERNAL_ERROR,
                message: format!("The task could not record its input requests: {error}"),
            }),
        }
    }
}

/// What a worker needs besides the tool's future.
pub(crate) struct Worker {
    pub(crate) restart: Restart,
    pub(crate) context: Context,
    pub(crate) asks: mpsc::UnboundedReceiver<Ask>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) permit: Permit,
}

/// A tool's task, aborted when dropped.
struct Aborting(tokio::task::JoinHandle<std::thread::Result<Reply>>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Waiting {
    /// (wire key, the tool's key) of each outstanding request.
    keys: Vec<(String, String)>,
    gathered: Map<String, Value>,
    resume: Resume,
}

enum Resume {
    /// The tool awaits [`Context::ask`].
    Answer(oneshot::Sender<Result<Map<String, Value>, ToolError>>),
    /// The tool returned [`InputRequired`]: it runs again with the answers and its state.
    Restart(Option<Value>),
}

/// `future` with a panic caught.
pub(crate) fn catching(future: BoxFuture<'static, Reply>) -> ToolRun {
    use futures_util::FutureExt;
    Box::pin(std::panic::AssertUnwindSafe(future).catch_unwind())
}

fn unknown(id: &str) -> RpcError {
    RpcError::invalid_params(format!("Unknown task: {id}"))
}

/// A store failure on a task request: nothing changed, the caller may retry (HTTP 503).
fn unavailable(error: &crate::store::StoreError) -> RpcError {
    RpcError::internal(format!(
        "The task store is unavailable ({error}); retry the request"
    ))
    .with_status(http::StatusCode::SERVICE_UNAVAILABLE)
}
