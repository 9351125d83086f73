//! Server-sent-event responses: a request's notifications, then its result, then the end.

use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use http::HeaderValue;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::dispatch::Finish;
use crate::protocol::RequestId;

enum State {
    Running {
        id: RequestId,
        notifications: mpsc::Receiver<Value>,
        finish: Finish,
    },
    Draining {
        notifications: mpsc::Receiver<Value>,
        last: Vec<u8>,
    },
    Done,
}

/// Serializes the final JSON-RPC response.
fn final_message(
    id: &RequestId,
    result: Result<axum::body::Bytes, crate::protocol::error::RpcError>,
) -> Vec<u8> {
    match result {
        Ok(result) => crate::transport::http::result_body(id, &result),
        Err(error) => serde_json::to_vec(&error.with_id(Some(id.clone())).to_response())
            .expect("errors serialize"),
    }
}

fn event(bytes: &[u8]) -> Event {
    Event::default()
        .event("message")
        .data(String::from_utf8_lossy(bytes))
}

/// The event stream. The request's future is polled by the stream itself, so when the client
/// goes away and the body is dropped, the request is dropped with it: that is cancellation.
fn events(
    id: RequestId,
    notifications: mpsc::Receiver<Value>,
    finish: Finish,
) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    stream::unfold(
        State::Running {
            id,
            notifications,
            finish,
        },
        |state| async move {
            match state {
                State::Running {
                    id,
                    mut notifications,
                    mut finish,
                } => {
                    tokio::select! {
                        biased;
                        Some(message) = notifications.recv() => {
                            let bytes = serde_json::to_vec(&message).expect("notifications serialize");
                            Some((Ok(event(&bytes)), State::Running { id, notifications, finish }))
                        }
                        result = &mut finish => {
                            let last = final_message(&id, result);
                            // Notifications sent in the same poll as completion are still queued.
                            match notifications.try_recv() {
                                Ok(message) => {
                                    let bytes = serde_json::to_vec(&message).expect("notifications serialize");
                                    Some((Ok(event(&bytes)), State::Draining { notifications, last }))
                                }
                                Err(_) => Some((Ok(event(&last)), State::Done)),
                            }
                        }
                    }
                }
                State::Draining {
                    mut notifications,
                    last,
                } => match notifications.try_recv() {
                    Ok(message) => {
                        let bytes = serde_json::to_vec(&message).expect("notifications serialize");
                        Some((
                            Ok(event(&bytes)),
                            State::Draining {
                                notifications,
                                last,
                            },
                        ))
                    }
                    Err(_) => Some((Ok(event(&last)), State::Done)),
                },
                State::Done => None,
            }
        },
    )
}

/// The `text/event-stream` response for a streaming request.
pub(crate) fn response(
    id: RequestId,
    notifications: mpsc::Receiver<Value>,
    finish: Finish,
    keep_alive: Duration,
) -> Response {
    let mut response = Sse::new(events(id, notifications, finish))
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response();
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// Runs a streaming request to the end in-process, collecting what it would have streamed.
pub(crate) async fn collect(
    mut notifications: mpsc::Receiver<Value>,
    finish: Finish,
) -> (
    Vec<Value>,
    Result<axum::body::Bytes, crate::protocol::error::RpcError>,
) {
    let result = finish.await;
    let mut collected = Vec::new();
    while let Ok(message) = notifications.try_recv() {
        collected.push(message);
    }
    (collected, result)
}
