//! Streamable HTTP: one POST per request with the routing headers, an answer in JSON or as a
//! server-sent-event stream of the request's notifications and then its response.

use std::time::Duration;

use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::Value;
use tokio::sync::mpsc;

use super::error::{ClientError, RpcFailure, TransportErrorKind};
use super::wire::{self, Incoming, Outgoing, SseParser};
use crate::protocol::headers::{METHOD_HEADER, NAME_HEADER, PROTOCOL_VERSION_HEADER};

/// An HTTP endpoint and the client that reaches it.
pub(super) struct Http {
    client: reqwest::Client,
    url: reqwest::Url,
    /// Headers every request carries (`Authorization`, the caller's own).
    headers: HeaderMap,
    /// The most bytes one answer (one event of a stream) may hold.
    limit: usize,
}

/// What to do with each message of a streamed answer before the response.
pub(super) type Sink<'a> = &'a (dyn Fn(Value) + Send + Sync);

impl Http {
    pub(super) fn new(url: &str, headers: HeaderMap, limit: usize) -> Result<Http, ClientError> {
        let url = reqwest::Url::parse(url)
            .map_err(|error| ClientError::InvalidRequest(format!("the URL {url:?}: {error}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ClientError::InvalidRequest(format!(
                "the URL {url} is not http:// or https://"
            )));
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|error| ClientError::Local(format!("no HTTP client: {error}")))?;
        Ok(Http {
            client,
            url,
            headers,
            limit,
        })
    }

    /// The endpoint, as the client was given it.
    pub(super) fn url(&self) -> &str {
        self.url.as_str()
    }

    fn post(&self, out: &Outgoing) -> reqwest::RequestBuilder {
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let text = |value: &str| {
            HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
        };
        headers.insert(
            HeaderName::from_static(PROTOCOL_VERSION_HEADER),
            text(&wire::header_value(&out.version)),
        );
        headers.insert(HeaderName::from_static(METHOD_HEADER), text(&out.method));
        if let Some(name) = &out.name {
            headers.insert(
                HeaderName::from_static(NAME_HEADER),
                text(&wire::header_value(name)),
            );
        }
        for (name, value) in &out.params {
            headers.insert(name.clone(), text(value));
        }
        self.client
            .post(self.url.clone())
            .headers(headers)
            .body(out.body.clone())
    }

    /// Sends `out` and returns its response (`result` or error); the messages a stream carries
    /// before it go to `sink`.
    pub(super) async fn send(&self, out: &Outgoing, sink: Sink<'_>) -> Result<Value, ClientError> {
        let mut response = self.post(out).send().await.map_err(sent_error)?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        if is_stream(response.headers()) {
            let mut parser = SseParser::new(self.limit);
            let mut events = Vec::new();
            loop {
                let chunk = response.chunk().await.map_err(read_error)?;
                match &chunk {
                    Some(bytes) => parser.push(bytes, &mut events)?,
                    None => parser.finish(&mut events)?,
                }
                for data in events.drain(..) {
                    if let Some(answer) = self.message(out, &data, status, sink)? {
                        return answer;
                    }
                }
                if chunk.is_none() {
                    return Err(ClientError::transport(
                        TransportErrorKind::Lost,
                        "the event stream ended before the response",
                    ));
                }
            }
        }
        let body = read_body(&mut response, self.limit).await?;
        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        match parsed {
            Some(message) if message.get("jsonrpc").is_some() => match wire::classify(message)? {
                Incoming::Response(_, Ok(result)) if (200..300).contains(&status) => Ok(result),
                Incoming::Response(_, Ok(_)) => Err(ClientError::Protocol(format!(
                    "a result with HTTP status {status}"
                ))),
                Incoming::Response(_, Err(mut failure)) => {
                    failure.status = Some(status);
                    failure.retry_after = retry_after;
                    Err(ClientError::Rpc(Box::new(failure)))
                }
                _ => Err(ClientError::Protocol(
                    "the answer to a request is not a response".into(),
                )),
            },
            _ if (200..300).contains(&status) => Err(ClientError::Protocol(format!(
                "HTTP {status} whose body is not a JSON-RPC response"
            ))),
            _ => Err(ClientError::Http {
                status,
                body: excerpt(&body),
                retry_after,
            }),
        }
    }

    /// One message of a stream: `Some` with the answer once it is the response.
    fn message(
        &self,
        out: &Outgoing,
        data: &str,
        status: u16,
        sink: Sink<'_>,
    ) -> Result<Option<Result<Value, ClientError>>, ClientError> {
        if data.trim().is_empty() {
            return Ok(None);
        }
        let message: Value = serde_json::from_str(data).map_err(|error| {
            ClientError::Protocol(format!("an event that is not JSON: {error}"))
        })?;
        match wire::classify(message)? {
            Incoming::Notification(message) => {
                sink(message);
                Ok(None)
            }
            Incoming::Request => {
                tracing::warn!("the server sent a request on a response stream; ignored");
                Ok(None)
            }
            Incoming::Response(id, answer) => {
                if id.as_ref().and_then(Value::as_i64) != Some(out.id) {
                    return Err(ClientError::Protocol(format!(
                        "a response for id {} on the stream of request {}",
                        id.unwrap_or(Value::Null),
                        out.id
                    )));
                }
                Ok(Some(answer.map_err(|mut failure| {
                    failure.status = Some(status);
                    ClientError::Rpc(Box::new(failure))
                })))
            }
        }
    }

    /// Sends `out` and hands every message of its stream to `messages` until the stream ends,
    /// the response included: for `subscriptions/listen`. Returns when the stream ends or
    /// `messages` is closed (dropping the stream, which cancels the request).
    pub(super) async fn stream(
        &self,
        out: &Outgoing,
        messages: mpsc::Sender<Result<Value, ClientError>>,
    ) {
        let failed = |error| async {
            let _ = messages.send(Err(error)).await;
        };
        let mut response = match self.post(out).send().await {
            Ok(response) => response,
            Err(error) => return failed(sent_error(error)).await,
        };
        let status = response.status().as_u16();
        if !is_stream(response.headers()) {
            let answer = match read_body(&mut response, self.limit).await {
                Ok(body) => plain_answer(&body, status),
                Err(error) => Err(error),
            };
            let _ = messages.send(answer).await;
            return;
        }
        let mut parser = SseParser::new(self.limit);
        let mut events = Vec::new();
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk,
                () = messages.closed() => return,
            };
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(error) => return failed(read_error(error)).await,
            };
            let parsed = match &chunk {
                Some(bytes) => parser.push(bytes, &mut events),
                None => parser.finish(&mut events),
            };
            if let Err(error) = parsed {
                return failed(error).await;
            }
            for data in events.drain(..) {
                let message = match serde_json::from_str::<Value>(&data) {
                    Ok(message) => Ok(message),
                    Err(error) => Err(ClientError::Protocol(format!(
                        "an event that is not JSON: {error}"
                    ))),
                };
                if messages.send(message).await.is_err() {
                    return;
                }
            }
            if chunk.is_none() {
                return;
            }
        }
    }
}

/// A whole JSON answer where a stream was expected: its response message, or the error it
/// carries.
fn plain_answer(body: &[u8], status: u16) -> Result<Value, ClientError> {
    let message: Option<Value> = serde_json::from_slice(body).ok();
    match message {
        Some(message) if message.get("error").is_some() => {
            let failure = RpcFailure::from_error(&message["error"], Some(status));
            Err(ClientError::Rpc(Box::new(failure)))
        }
        Some(message) if (200..300).contains(&status) && message.get("result").is_some() => {
            Ok(message)
        }
        _ => Err(ClientError::Http {
            status,
            body: excerpt(body),
            retry_after: None,
        }),
    }
}

fn is_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("text/event-stream"))
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// Reads a body whole, up to `limit` bytes.
async fn read_body(response: &mut reqwest::Response, limit: usize) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(read_error)? {
        if body.len() + chunk.len() > limit {
            return Err(wire::too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The first 512 bytes of a body, as text.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(512)]);
    text.trim().to_owned()
}

/// The text of an error and its causes.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// An error while sending: before a connection there was nothing sent.
fn sent_error(error: reqwest::Error) -> ClientError {
    let kind = if error.is_connect() {
        TransportErrorKind::Connect
    } else if error.is_timeout() {
        TransportErrorKind::Timeout
    } else {
        TransportErrorKind::Lost
    };
    ClientError::transport(kind, chain(&error))
}

/// An error while reading the answer: the request was sent.
fn read_error(error: reqwest::Error) -> ClientError {
    let kind = if error.is_timeout() {
        TransportErrorKind::Timeout
    } else {
        TransportErrorKind::Lost
    };
    ClientError::transport(kind, chain(&error))
}
