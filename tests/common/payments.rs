//! A payment service for the tests of effects: `POST /charges` with an `Idempotency-Key`,
//! charging once per key (a repeated key gets its first charge back) and counting every request,
//! answering as a script says: charge, fail, decline, hang, or answer too late.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

/// How the payment stub answers a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    /// Charges the card (once per key; a repeated key gets the first charge back).
    Charge,
    /// 503, nothing charged.
    Unavailable,
    /// 402, card declined, nothing charged.
    Declined,
    /// Charges, then holds the request open and never answers.
    Hang,
    /// Charges, then answers after a second (past the server's 500 ms timeout).
    Slow,
}

#[derive(Default)]
struct Ledger {
    /// The charge of each key: its id and amount.
    charges: HashMap<String, (String, u64)>,
    /// Every request, by key.
    requests: HashMap<String, u32>,
    /// How the next requests are answered, in order; then `otherwise`.
    script: VecDeque<Answer>,
    otherwise: Option<Answer>,
}

/// A payment service: `POST /charges` with an `Idempotency-Key`.
pub struct PaymentStub {
    ledger: Mutex<Ledger>,
    /// A request was answered `Hang`.
    pub hung: tokio::sync::Notify,
    pub url: String,
}

impl PaymentStub {
    pub async fn start(script: &[Answer]) -> Arc<PaymentStub> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stub = Arc::new(PaymentStub {
            ledger: Mutex::new(Ledger {
                script: script.iter().copied().collect(),
                ..Ledger::default()
            }),
            hung: tokio::sync::Notify::new(),
            url: format!("http://{}/charges", listener.local_addr().unwrap()),
        });
        let app = axum::Router::new()
            .route("/charges", post(charge))
            .with_state(Arc::clone(&stub));
        tokio::spawn(async move { axum::serve(listener, app).await });
        stub
    }

    pub fn otherwise(&self, answer: Answer) {
        self.ledger.lock().unwrap().otherwise = Some(answer);
    }

    pub fn charges(&self) -> HashMap<String, (String, u64)> {
        self.ledger.lock().unwrap().charges.clone()
    }

    pub fn requests(&self, key: &str) -> u32 {
        self.ledger
            .lock()
            .unwrap()
            .requests
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

/// A JSON body.
fn json_body(body: Value) -> String {
    body.to_string()
}

async fn charge(
    State(stub): State<Arc<PaymentStub>>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|key| key.to_str().ok())
        .map(str::to_owned)
    else {
        return (
            StatusCode::BAD_REQUEST,
            json_body(json!({ "error": "no Idempotency-Key" })),
        );
    };
    let amount = body["amount_eur"].as_u64().unwrap_or(0);
    let (answer, charged) = {
        let mut ledger = stub.ledger.lock().unwrap();
        *ledger.requests.entry(key.clone()).or_default() += 1;
        let answer = ledger
            .script
            .pop_front()
            .or(ledger.otherwise)
            .unwrap_or(Answer::Charge);
        let charged = match answer {
            Answer::Unavailable | Answer::Declined => None,
            _ => {
                let next = format!("ch_{}", ledger.charges.len() + 1);
                let (id, _) = ledger
                    .charges
                    .entry(key.clone())
                    .or_insert((next, amount))
                    .clone();
                Some(id)
            }
        };
        (answer, charged)
    };
    match answer {
        Answer::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            json_body(json!({ "error": "try later" })),
        ),
        Answer::Declined => (
            StatusCode::PAYMENT_REQUIRED,
            json_body(json!({ "error": "card declined" })),
        ),
        Answer::Hang => {
            stub.hung.notify_one();
            std::future::pending().await
        }
        Answer::Slow => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            (StatusCode::OK, json_body(json!({ "charge": charged })))
        }
        Answer::Charge => (StatusCode::OK, json_body(json!({ "charge": charged }))),
    }
}
