//! Fetching what a verifier needs from an authorization server: over HTTPS only (plain HTTP to
//! loopback, for tests and local development), with a timeout, no redirects and a size cap.

use std::time::Duration;

use super::error::ConfigError;

/// How long one fetch may take by default.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// A client for one authorization-server URL.
#[derive(Clone)]
pub(crate) struct Fetcher {
    pub(crate) url: reqwest::Url,
    client: reqwest::Client,
    max_bytes: usize,
}

impl Fetcher {
    pub(crate) fn new(
        url: &str,
        what: &str,
        max_bytes: usize,
        timeout: Duration,
    ) -> Result<Self, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid(reason);
        let url = reqwest::Url::parse(url)
            .map_err(|e| invalid(format!("the {what} URL {url:?} is not a URL: {e}")))?;
        let loopback = url.host_str().is_some_and(|host| {
            host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        match url.scheme() {
            "https" => {}
            "http" if loopback => {}
            _ => {
                return Err(invalid(format!(
                    "the {what} URL {url} must use https (http is accepted on loopback only)"
                )));
            }
        }
        let mut client = reqwest::Client::builder()
            .timeout(timeout)
            // A redirect could lead anywhere, including to plain HTTP or an internal address.
            .redirect(reqwest::redirect::Policy::none())
            .https_only(!loopback);
        if url.scheme() == "http" {
            // Plain HTTP needs no trust roots: loading the system's would only cost time.
            client = client.tls_certs_only(std::iter::empty());
        }
        let client = client.build().map_err(|e| {
            invalid(format!(
                "no HTTP client for the {what}: {e} (HTTPS needs the system's CA certificates)"
            ))
        })?;
        Ok(Fetcher {
            url,
            client,
            max_bytes,
        })
    }

    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Sends `request` and reads a JSON answer of at most `max_bytes`; the error says why not,
    /// without quoting anything secret.
    pub(crate) async fn json<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, String> {
        let mut response = request
            .send()
            .await
            .map_err(|e| format!("{} is unreachable: {}", self.url, e.without_url()))?;
        if !response.status().is_success() {
            return Err(format!("{} answered HTTP {}", self.url, response.status()));
        }
        if response
            .content_length()
            .is_some_and(|length| length > self.max_bytes as u64)
        {
            return Err(format!(
                "{} answered more than {} bytes",
                self.url, self.max_bytes
            ));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("{} broke off its answer: {}", self.url, e.without_url()))?
        {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(format!(
                    "{} answered more than {} bytes",
                    self.url, self.max_bytes
                ));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| {
            format!(
                "{} answered something other than the expected JSON: {e}",
                self.url
            )
        })
    }
}
