//! The Streamable HTTP transport: one POST endpoint, checked in the order the protocol pins.

mod deadline;
pub(crate) mod serve;
pub(crate) mod sse;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;

use crate::context::Caller;
use crate::dispatch::{Outcome, Transport};
use crate::protocol::error::RpcError;
use crate::protocol::{Envelope, RequestId};
use crate::server::McpServer;
use crate::server::access::Target;
use crate::server::limits::{BodyBytes, InFlightSlot};

const JSON: HeaderValue = HeaderValue::from_static("application/json");

impl McpServer {
    /// An axum router serving the MCP endpoint (at `/mcp` unless configured) and `GET /healthz`.
    ///
    /// Nest it under any path and wrap it in any tower layer:
    /// `Router::new().nest("/api", server.router()).layer(TraceLayer::new_for_http())`.
    ///
    /// An OAuth resource server also serves its RFC 9728 metadata, with no token needed, at
    /// `/.well-known/oauth-protected-resource` followed by the resource's path and at
    /// `/.well-known/oauth-protected-resource` itself: mount the router at the root of the
    /// origin its resource URI names, or serve
    /// [`protected_resource_metadata`](McpServer::protected_resource_metadata) yourself.
    pub fn router(&self) -> Router {
        let mut router = Router::new()
            .route(&self.shared.endpoint_path, any(endpoint))
            .route("/healthz", get(healthz));
        if let Some(oauth) = &self.shared.oauth {
            router = router.route(crate::auth::oauth::ROOT_METADATA_PATH, get(metadata));
            if oauth.metadata_path != crate::auth::oauth::ROOT_METADATA_PATH {
                router = router.route(&oauth.metadata_path, get(metadata));
            }
        }
        router.with_state(self.clone())
    }

    /// The RFC 9728 protected resource metadata document, when the server is an OAuth
    /// resource server.
    pub fn protected_resource_metadata(&self) -> Option<Bytes> {
        self.shared
            .oauth
            .as_ref()
            .map(|oauth| oauth.metadata.clone())
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn metadata(State(server): State<McpServer>) -> Response {
    match server.protected_resource_metadata() {
        Some(document) => ([(CONTENT_TYPE, JSON)], document).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

// The whole request is taken apart rather than extracted piece by piece: axum's `HeaderMap`,
// `Method` and `Uri` extractors clone what they hand out. The request's span is opened by the
// request path once the message is parsed, so that it can continue the trace its `_meta` names.
async fn endpoint(State(server): State<McpServer>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let http::request::Parts {
        method,
        uri,
        headers,
        ..
    } = parts;
    server.serve_http(method, uri, headers, body).await
}

impl McpServer {
    async fn serve_http(
        &self,
        method: Method,
        uri: http::Uri,
        headers: HeaderMap,
        body: Body,
    ) -> Response {
        if method != Method::POST {
            let mut response = error_response(
                &RpcError::invalid_request(format!(
                    "HTTP {method} is not supported: send each JSON-RPC message as a POST"
                ))
                .with_status(StatusCode::METHOD_NOT_ALLOWED),
            );
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
            return response;
        }
        let authority = uri.authority().map(|a| a.as_str());
        if let Err(reason) = self.shared.hosts.check(&headers, authority) {
            return error_response(
                &RpcError::invalid_request(reason).with_status(StatusCode::FORBIDDEN),
            );
        }
        let caller = match self.caller(&headers).await {
            Ok(caller) => caller,
            Err(refusal) => return error_response(&refusal),
        };
        // Held until the answer's body is written or dropped, so a client that stops reading
        // still counts against its principal.
        let slot = match self.shared.in_flight.enter(&caller.principal) {
            Ok(slot) => slot,
            Err(refusal) => return closing(error_response(&refusal)),
        };
        if !is_json(&headers) {
            return error_response(
                &RpcError::invalid_request("Content-Type must be application/json")
                    .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE),
            );
        }
        let (body, reserved) = match self.read_body(&headers, body).await {
            Ok(body) => body,
            // The rest of the body may still be on its way: the connection cannot be reused.
            Err(error) => return closing(error_response(&error)),
        };
        let envelope = match Envelope::parse(&body) {
            Ok(envelope) => envelope,
            Err(error) => return error_response(&error),
        };
        // The message is parsed: its bytes go back to the budget.
        drop((body, reserved));
        let response = self.answer(envelope, &headers, caller).await;
        match slot {
            Some(slot) => response.map(|body| Body::new(Holding { body, _slot: slot })),
            None => response,
        }
    }

    async fn answer(&self, envelope: Envelope, headers: &HeaderMap, caller: Caller) -> Response {
        let outcome =
            crate::dispatch::handle(self, envelope, Transport::Http(headers), caller).await;
        match outcome {
            Outcome::Accepted => StatusCode::ACCEPTED.into_response(),
            Outcome::Result { id, result } => result_response(&id, &result),
            Outcome::Stream {
                id,
                notifications,
                finish,
            } => crate::transport::http::sse::response(
                id,
                notifications,
                finish,
                self.shared.keep_alive,
            ),
            Outcome::Error(error) => error_response(&error),
        }
    }

    /// Who is calling, from the request's credentials, or the refusal to answer with. With
    /// OAuth, a request whose routing headers name an item its token may not use is refused
    /// here, before its body is read.
    async fn caller(&self, headers: &HeaderMap) -> Result<Caller, RpcError> {
        let mut caller = Caller::default();
        if let Some(oauth) = &self.shared.oauth {
            let snapshot = self.shared.snapshot.load_full();
            let named = Target::named_by(headers);
            let target = named
                .as_ref()
                .and_then(|(method, name)| Target::of(method, name, &snapshot));
            let needed = target.and_then(|target| target.requirement(oauth, &snapshot));
            let (principal, granted) = oauth.authenticate(headers, needed).await?;
            if let Some(target) = target {
                let access = crate::server::access::Access {
                    oauth,
                    granted: &granted,
                };
                access.check_requirement(target, needed, &snapshot)?;
            }
            caller = Caller {
                principal,
                scopes: Some(granted),
            };
        }
        if let Some(authenticate) = &self.shared.authenticate {
            let principal = authenticate(headers)?;
            if self.shared.oauth.is_none() {
                caller.principal = principal;
            }
        }
        Ok(caller)
    }

    /// The request's body, within the body limit, the body-read deadline and the server's
    /// budget of buffered bytes, with the bytes it holds of that budget.
    async fn read_body(
        &self,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<(Bytes, BodyBytes), RpcError> {
        let limit = self.shared.body_limit;
        let too_large = || {
            RpcError::invalid_request(format!("The request body exceeds the {limit}-byte limit"))
                .with_status(StatusCode::PAYLOAD_TOO_LARGE)
        };
        let declared = headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|length| length > limit as u64) {
            return Err(too_large());
        }
        let timeout = self.shared.connections.body_read_timeout;
        let mut reserved = self.shared.body_budget.reserve();
        let read = async {
            let mut body = http_body_util::Limited::new(body, limit);
            let failed = |error: Box<dyn std::error::Error + Send + Sync>| {
                if error.is::<http_body_util::LengthLimitError>() {
                    too_large()
                } else {
                    RpcError::invalid_request(format!(
                        "The request body could not be read: {error}"
                    ))
                }
            };
            // One frame is the usual whole body: kept as it came, without a copy.
            let mut whole: Option<Bytes> = None;
            let mut buffer = Vec::new();
            // Bytes count against the budget as they arrive, not as a length promises them.
            let (mut received, mut accounted) = (0, 0);
            while let Some(frame) = body.frame().await {
                let Ok(data) = frame.map_err(failed)?.into_data() else {
                    continue;
                };
                received += data.len();
                if received > accounted {
                    if !reserved.grow(received - accounted) {
                        return Err(RpcError::body_budget_spent());
                    }
                    accounted = received;
                }
                if whole.is_none() && buffer.is_empty() {
                    whole = Some(data);
                    continue;
                }
                if let Some(first) = whole.take() {
                    buffer.extend_from_slice(&first);
                }
                buffer.extend_from_slice(&data);
            }
            Ok(whole.unwrap_or_else(|| Bytes::from(buffer)))
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(bytes)) => Ok((bytes, reserved)),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(RpcError::body_timeout(timeout)),
        }
    }
}

/// A response after which the connection closes: the request's body may not have been read
/// whole, so nothing after it could be parsed.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// An answer's body that holds its request's in-flight slot until it is written or dropped.
struct Holding {
    body: Body,
    _slot: InFlightSlot,
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// `{"jsonrpc":"2.0","id":...,"result":...}` around an already serialized result.
pub(crate) fn result_body(id: &RequestId, result: &[u8]) -> Vec<u8> {
    let id = serde_json::to_vec(id).expect("ids serialize");
    let mut body = Vec::with_capacity(result.len() + id.len() + 40);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(&id);
    body.extend_from_slice(br#","result":"#);
    body.extend_from_slice(result);
    body.push(b'}');
    body
}

fn result_response(id: &RequestId, result: &[u8]) -> Response {
    ([(CONTENT_TYPE, JSON)], result_body(id, result)).into_response()
}

fn error_response(error: &RpcError) -> Response {
    let body = serde_json::to_vec(&error.to_response()).expect("errors serialize");
    let mut response = (error.status(), [(CONTENT_TYPE, JSON)], body).into_response();
    if let Some(wait) = error.retry_after() {
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from(wait.as_secs()),
        );
    }
    if let Some(challenge) = error.challenge()
        && let Ok(challenge) = HeaderValue::from_str(challenge)
    {
        response
            .headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, challenge);
    }
    response
}
