//! `Host` and `Origin` checks against DNS rebinding.

use http::HeaderMap;
use http::header::{HOST, ORIGIN};

/// Which host names may appear in `Host` and `Origin`.
#[derive(Debug, Clone)]
pub(crate) enum HostPolicy {
    Any,
    Only(Vec<String>),
}

impl HostPolicy {
    pub(crate) fn loopback() -> Self {
        Self::only(["localhost", "127.0.0.1", "[::1]"])
    }

    pub(crate) fn only<I, S>(hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        HostPolicy::Only(
            hosts
                .into_iter()
                .map(|h| normalize(&h.into()).to_owned())
                .collect(),
        )
    }

    pub(crate) fn any() -> Self {
        HostPolicy::Any
    }

    fn allows(&self, host: &str) -> bool {
        match self {
            HostPolicy::Any => true,
            HostPolicy::Only(hosts) => {
                let host = normalize(host);
                hosts
                    .iter()
                    .any(|allowed| allowed.eq_ignore_ascii_case(host))
            }
        }
    }

    /// Checks `Host` and, when present, `Origin`. The error says which one was refused.
    /// `authority` is the request target's authority, which HTTP/2 sends instead of `Host`.
    pub(crate) fn check(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), String> {
        if matches!(self, HostPolicy::Any) {
            return Ok(());
        }
        let host = headers.get(HOST).map(|h| h.to_str()).or(authority.map(Ok));
        match host {
            Some(Ok(host)) if self.allows(strip_port(host)) => {}
            Some(Ok(host)) => return Err(format!("Host {host:?} is not allowed by this server")),
            Some(Err(_)) => return Err("The Host header is not readable".into()),
            None => return Err("The Host header is required".into()),
        }
        if let Some(origin) = headers.get(ORIGIN) {
            let origin = origin
                .to_str()
                .map_err(|_| "The Origin header is not readable".to_owned())?;
            let authority = origin
                .split_once("://")
                .map(|(_, rest)| rest.split('/').next().unwrap_or(rest));
            match authority {
                Some(authority) if self.allows(strip_port(authority)) => {}
                _ => return Err(format!("Origin {origin:?} is not allowed by this server")),
            }
        }
        Ok(())
    }
}

/// `host:port` or `[v6]:port` without the port.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        // `[v6]` or `[v6]:port`; anything else after the bracket is not a host to allow.
        return match authority.find(']') {
            Some(end)
                if authority[end + 1..].is_empty()
                    || authority[end + 1..]
                        .strip_prefix(':')
                        .is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit())) =>
            {
                &authority[..=end]
            }
            _ => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

fn normalize(host: &str) -> &str {
    host.trim().trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(host: &'static str, origin: Option<&'static str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static(host));
        if let Some(origin) = origin {
            headers.insert(ORIGIN, HeaderValue::from_static(origin));
        }
        headers
    }

    #[test]
    fn loopback_policy() {
        let policy = HostPolicy::loopback();
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:9",
            "LOCALHOST",
        ] {
            assert!(policy.check(&headers(ok, None), None).is_ok(), "{ok}");
        }
        assert!(
            policy
                .check(&headers("localhost", Some("http://127.0.0.1:3000")), None)
                .is_ok()
        );
        assert!(
            policy
                .check(&headers("evil.example.com", None), None)
                .is_err()
        );
        assert!(
            policy
                .check(&headers("localhost", Some("http://evil.example.com")), None)
                .is_err()
        );
        assert!(
            policy
                .check(&headers("localhost", Some("null")), None)
                .is_err()
        );
        assert!(policy.check(&HeaderMap::new(), None).is_err());
        assert!(
            policy
                .check(&HeaderMap::new(), Some("localhost:8080"))
                .is_ok()
        );
        assert!(
            policy
                .check(&headers("[::1]evil.example.com", None), None)
                .is_err()
        );
    }

    #[test]
    fn a_suffix_after_the_last_colon_that_is_not_a_port_stays_part_of_the_host() {
        // Otherwise `localhost:evil.example.com` would pass as `localhost`.
        assert_eq!(strip_port("localhost:8080"), "localhost");
        assert_eq!(strip_port("localhost:evil"), "localhost:evil");
        let policy = HostPolicy::loopback();
        for refused in ["localhost:evil.example.com", "127.0.0.1:80a"] {
            assert!(
                policy.check(&headers(refused, None), None).is_err(),
                "{refused}"
            );
        }
        assert!(
            policy
                .check(&headers("localhost", Some("http://localhost:evil")), None)
                .is_err()
        );
    }
}
