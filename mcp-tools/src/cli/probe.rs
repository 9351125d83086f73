//! `probe URL`: the protocol-level health check. A load balancer checks `GET /healthz`; this
//! checks that the process behind it speaks the protocol version its clients ask for, which is
//! what breaks after a dependency upgrade.

use std::time::Duration;

use serde_json::{Value, json};

/// How a server answered `server/discover`, each class with its own exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// 200 with `supportedVersions` listing the version asked for (exit status 0).
    Healthy {
        /// Every version the endpoint serves.
        versions: Vec<String>,
    },
    /// 404 with JSON-RPC `-32601`: alive, but not a 2026-07-28 server (exit status 3).
    NotThisRevision,
    /// 400 with JSON-RPC `-32022`: alive, but the version asked for is not served
    /// (exit status 4).
    VersionNotServed {
        /// The versions the server says it serves, when it says.
        supported: Vec<String>,
    },
    /// No answer, or one that fits none of the classes above (exit status 1).
    Unhealthy {
        /// What went wrong.
        reason: String,
    },
}

impl Probe {
    /// The process exit status of this class.
    pub fn exit_status(&self) -> u8 {
        match self {
            Probe::Healthy { .. } => 0,
            Probe::Unhealthy { .. } => 1,
            Probe::NotThisRevision => 3,
            Probe::VersionNotServed { .. } => 4,
        }
    }

    /// One line for a person or a monitoring system's log.
    pub fn summary(&self) -> String {
        match self {
            Probe::Healthy { versions } => format!("healthy: serves {}", versions.join(", ")),
            Probe::NotThisRevision => {
                "alive, but not a 2026-07-28 server: server/discover is not a method it knows (404, -32601)".to_owned()
            }
            Probe::VersionNotServed { supported } if supported.is_empty() => {
                "alive, but the protocol version asked for is not served (400, -32022)".to_owned()
            }
            Probe::VersionNotServed { supported } => format!(
                "alive, but the protocol version asked for is not served (400, -32022); it serves {}",
                supported.join(", ")
            ),
            Probe::Unhealthy { reason } => format!("unhealthy: {reason}"),
        }
    }
}

/// POSTs `server/discover` to `url` with the headers every 2026-07-28 request carries.
pub(super) async fn probe(url: &str, version: &str, timeout: Duration) -> Probe {
    let body = json!({
        "jsonrpc": "2.0",
        "id": "probe-1",
        "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-tools probe", "version": env!("CARGO_PKG_VERSION")},
            "io.modelcontextprotocol/clientCapabilities": {},
        }},
    });
    let client = match reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(client) => client,
        Err(error) => {
            return Probe::Unhealthy {
                reason: format!("no HTTP client: {error}"),
            };
        }
    };
    let sent = client
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", version)
        .header("Mcp-Method", "server/discover")
        .body(body.to_string())
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => {
            let reason = if error.is_timeout() {
                format!("no answer from {url} within {timeout:?}")
            } else {
                format!("{url} cannot be reached: {error}")
            };
            return Probe::Unhealthy { reason };
        }
    };
    let status = response.status().as_u16();
    let answer = match response.bytes().await {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes).ok(),
        Err(error) => {
            return Probe::Unhealthy {
                reason: format!("HTTP {status}, and the body could not be read: {error}"),
            };
        }
    };
    classify(status, version, answer.as_ref())
}

fn classify(status: u16, version: &str, answer: Option<&Value>) -> Probe {
    let Some(answer) = answer else {
        return Probe::Unhealthy {
            reason: format!("HTTP {status} without a JSON body"),
        };
    };
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let code = answer["error"]["code"].as_i64();
    match (status, code) {
        (200, None) => {
            let versions = strings(&answer["result"]["supportedVersions"]);
            if versions.iter().any(|served| served == version) {
                Probe::Healthy { versions }
            } else {
                Probe::Unhealthy {
                    reason: format!(
                        "HTTP 200, but supportedVersions ({}) does not list {version}",
                        versions.join(", ")
                    ),
                }
            }
        }
        (404, Some(-32601)) => Probe::NotThisRevision,
        (400, Some(-32022)) => Probe::VersionNotServed {
            supported: strings(&answer["error"]["data"]["supported"]),
        },
        (status, Some(code)) => Probe::Unhealthy {
            reason: format!(
                "HTTP {status} with JSON-RPC error {code}: {}",
                answer["error"]["message"].as_str().unwrap_or_default()
            ),
        },
        (status, None) => Probe::Unhealthy {
            reason: format!("HTTP {status} without a JSON-RPC error"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "2026-07-28";

    #[test]
    fn answers_are_classified_as_the_protocol_says() {
        let healthy =
            json!({"jsonrpc": "2.0", "id": "probe-1", "result": {"supportedVersions": [V]}});
        assert_eq!(
            classify(200, V, Some(&healthy)),
            Probe::Healthy {
                versions: vec![V.into()]
            }
        );
        let other = json!({"result": {"supportedVersions": ["2027-01-01"]}});
        assert!(matches!(
            classify(200, V, Some(&other)),
            Probe::Unhealthy { .. }
        ));
        let missing = json!({"error": {"code": -32601, "message": "Method not found"}});
        assert_eq!(classify(404, V, Some(&missing)), Probe::NotThisRevision);
        assert!(matches!(
            classify(400, V, Some(&missing)),
            Probe::Unhealthy { .. }
        ));
        let version = json!({"error": {"code": -32022, "message": "x", "data": {"supported": [V], "requested": "1999"}}});
        assert_eq!(
            classify(400, "1999", Some(&version)),
            Probe::VersionNotServed {
                supported: vec![V.into()]
            }
        );
        assert!(matches!(classify(502, V, None), Probe::Unhealthy { .. }));
        assert!(matches!(
            classify(500, V, Some(&json!({}))),
            Probe::Unhealthy { .. }
        ));
    }

    #[test]
    fn each_class_reads_as_one_line_that_names_it() {
        let healthy = Probe::Healthy {
            versions: vec![V.into(), "2025-11-25".into()],
        };
        assert_eq!(healthy.summary(), "healthy: serves 2026-07-28, 2025-11-25");
        assert!(
            Probe::NotThisRevision
                .summary()
                .contains("not a 2026-07-28 server")
        );
        let unnamed = Probe::VersionNotServed { supported: vec![] };
        assert_eq!(
            unnamed.summary(),
            "alive, but the protocol version asked for is not served (400, -32022)"
        );
        let named = Probe::VersionNotServed {
            supported: vec![V.into()],
        };
        assert!(
            named.summary().ends_with("; it serves 2026-07-28"),
            "{}",
            named.summary()
        );
        let down = Probe::Unhealthy {
            reason: "no answer".into(),
        };
        assert_eq!(down.summary(), "unhealthy: no answer");
    }

    #[test]
    fn every_class_has_its_own_exit_status() {
        let statuses = [
            Probe::Healthy { versions: vec![] }.exit_status(),
            Probe::Unhealthy {
                reason: String::new(),
            }
            .exit_status(),
            Probe::NotThisRevision.exit_status(),
            Probe::VersionNotServed { supported: vec![] }.exit_status(),
        ];
        assert_eq!(statuses, [0, 1, 3, 4]);
    }
}
