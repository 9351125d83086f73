//! Connection settings as libpq reads them: a URL or a `key=value` string, completed from the
//! `PG*` environment variables, and TLS as `sslmode` and `sslrootcert` ask, through rustls.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_postgres::config::SslMode as WireSslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::store::error::StoreError;

/// libpq's `sslmode`: how much of TLS the connection requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS if the server offers it, unverified (libpq's default).
    Prefer,
    /// TLS, unverified unless a root certificate is given (then as `VerifyCa`), as libpq does.
    Require,
    /// TLS with the server's chain verified, not its name.
    VerifyCa,
    /// TLS with the server's chain and name verified.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(StoreError::Backend(format!(
                    "sslmode {other:?} is not one of disable, allow, prefer, require, verify-ca, \
                     verify-full"
                )));
            }
        })
    }
}

/// Parsed connection settings: tokio-postgres's own, and the TLS settings it does not read.
pub(crate) struct ConnInfo {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) ssl_mode: SslMode,
    pub(crate) root_cert: Option<PathBuf>,
}

/// Reads `conninfo` (a `postgres://` URL or libpq `key=value` pairs) and fills what it leaves
/// out from `env` (libpq's variables: `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`,
/// `PGSSLMODE`, `PGSSLROOTCERT`, `PGAPPNAME`, `PGCONNECT_TIMEOUT`, `PGOPTIONS`), so a password
/// need not appear on a command line.
pub(crate) fn parse(
    conninfo: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ConnInfo, StoreError> {
    let (rest, ssl_mode, root_cert) = take_tls_options(conninfo)?;
    let mut config: tokio_postgres::Config = rest.parse().map_err(|error| {
        StoreError::Backend(format!(
            "the PostgreSQL connection string is not valid: {error}"
        ))
    })?;
    if config.get_hosts().is_empty() {
        for host in env("PGHOST")
            .or_else(|| env("PGHOSTADDR"))
            .unwrap_or_else(|| "localhost".to_owned())
            .split(',')
        {
            config.host(host);
        }
    }
    if config.get_ports().is_empty()
        && let Some(port) = env("PGPORT")
    {
        let port = port
            .parse()
            .map_err(|_| StoreError::Backend(format!("PGPORT {port:?} is not a port number")))?;
        config.port(port);
    }
    if config.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .unwrap_or_else(|| "postgres".into());
        config.user(user);
    }
    if config.get_password().is_none()
        && let Some(password) = env("PGPASSWORD")
    {
        config.password(password);
    }
    if config.get_dbname().is_none()
        && let Some(dbname) = env("PGDATABASE")
    {
        config.dbname(dbname);
    }
    if config.get_application_name().is_none() {
        config.application_name(env("PGAPPNAME").unwrap_or_else(|| "mcp-tools".into()));
    }
    if config.get_connect_timeout().is_none() {
        // As libpq: zero or less waits as long as the connection takes (the store's own
        // timeout still bounds every call).
        let seconds: i64 = match env("PGCONNECT_TIMEOUT") {
            Some(seconds) => seconds.trim().parse().map_err(|_| {
                StoreError::Backend(format!(
                    "PGCONNECT_TIMEOUT {seconds:?} is not a number of seconds"
                ))
            })?,
            None => 10,
        };
        if seconds > 0 {
            config.connect_timeout(std::time::Duration::from_secs(seconds.unsigned_abs()));
        }
    }
    if config.get_options().is_none()
        && let Some(options) = env("PGOPTIONS")
    {
        config.options(options);
    }
    let ssl_mode = match ssl_mode {
        Some(mode) => mode,
        None => match env("PGSSLMODE") {
            Some(mode) => SslMode::parse(&mode)?,
            None => SslMode::Prefer,
        },
    };
    let root_cert = root_cert.or_else(|| env("PGSSLROOTCERT").map(PathBuf::from));
    config.ssl_mode(match ssl_mode {
        SslMode::Disable => WireSslMode::Disable,
        SslMode::Prefer => WireSslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireSslMode::Require,
    });
    Ok(ConnInfo {
        config,
        ssl_mode,
        root_cert,
    })
}

/// Takes `sslmode` and `sslrootcert` out of `conninfo`, which tokio-postgres would refuse or
/// ignore: what remains, and their values.
fn take_tls_options(
    conninfo: &str,
) -> Result<(String, Option<SslMode>, Option<PathBuf>), StoreError> {
    let (mut ssl_mode, mut root_cert) = (None, None);
    let is_url = conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://");
    let rest = if is_url {
        let Some((base, query)) = conninfo.split_once('?') else {
            return Ok((conninfo.to_owned(), None, None));
        };
        // The other pairs stay exactly as written: tokio-postgres decodes them itself.
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let decoded = form_urlencoded::parse(pair.as_bytes()).next();
            match decoded {
                Some((key, value)) if key == "sslmode" => ssl_mode = Some(SslMode::parse(&value)?),
                Some((key, value)) if key == "sslrootcert" => {
                    root_cert = Some(PathBuf::from(&*value));
                }
                _ => kept.push(pair),
            }
        }
        if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else {
        let mut kept = Vec::new();
        for (key, value) in key_values(conninfo)? {
            match key.as_str() {
                "sslmode" => ssl_mode = Some(SslMode::parse(&value)?),
                "sslrootcert" => root_cert = Some(PathBuf::from(value)),
                _ => kept.push(format!(
                    "{key}='{}'",
                    value.replace('\\', "\\\\").replace('\'', "\\'")
                )),
            }
        }
        kept.join(" ")
    };
    Ok((rest, ssl_mode, root_cert))
}

/// The pairs of a libpq `key=value` string: values may be single-quoted, with `\` escapes.
fn key_values(conninfo: &str) -> Result<Vec<(String, String)>, StoreError> {
    let mut pairs = Vec::new();
    let mut chars = conninfo.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(StoreError::Backend(format!(
                "the PostgreSQL connection string is not valid: {key:?} has no value (write \
                 key=value pairs or a postgres:// URL)"
            )));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => {
                        return Err(StoreError::Backend(format!(
                            "the PostgreSQL connection string is not valid: the value of \
                             {key:?} has no closing quote"
                        )));
                    }
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                if c == '\\' {
                    chars.next();
                    value.extend(chars.next());
                    continue;
                }
                value.push(c);
                chars.next();
            }
        }
        pairs.push((key, value));
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The TLS connector `sslmode` asks for.
pub(crate) fn tls(info: &ConnInfo) -> Result<MakeRustlsConnect, StoreError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| StoreError::Backend(format!("TLS setup failed: {error}")))?;
    // `sslrootcert=system` (as libpq 16) asks for the system's roots.
    let root_cert = info
        .root_cert
        .as_ref()
        .filter(|path| path.as_os_str() != "system");
    let verify = match info.ssl_mode {
        SslMode::Disable | SslMode::Prefer => None,
        // As libpq: `require` verifies the chain when a root certificate is given.
        SslMode::Require => info.root_cert.as_ref().map(|_| false),
        // Any public CA would do for a chain without a name: the roots must be the caller's.
        SslMode::VerifyCa if root_cert.is_none() => {
            return Err(StoreError::Backend(
                "sslmode verify-ca needs sslrootcert naming the CA that signs the server's \
                 certificate (with the system's roots, use verify-full, which checks the name)"
                    .into(),
            ));
        }
        SslMode::VerifyCa => Some(false),
        SslMode::VerifyFull => Some(true),
    };
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        None => Arc::new(Unverified(provider)),
        Some(check_name) => {
            let roots = Arc::new(roots(root_cert)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|error| StoreError::Backend(format!("TLS setup failed: {error}")))?;
            if check_name {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            }
        }
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The roots a verified connection trusts: `sslrootcert`, or the system's.
fn roots(root_cert: Option<&PathBuf>) -> Result<RootCertStore, StoreError> {
    let mut store = RootCertStore::empty();
    match root_cert {
        Some(path) => {
            let certificates = CertificateDer::pem_file_iter(path)
                .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
                .map_err(|error| {
                    StoreError::Backend(format!(
                        "sslrootcert {}: could not read its certificates: {error}",
                        path.display()
                    ))
                })?;
            for certificate in certificates {
                store.add(certificate).map_err(|error| {
                    StoreError::Backend(format!(
                        "sslrootcert {}: a certificate was refused: {error}",
                        path.display()
                    ))
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
        }
    }
    if store.is_empty() {
        return Err(StoreError::Backend(
            "a verified TLS connection (sslmode verify-ca or verify-full) needs trusted roots: \
             give sslrootcert, or install the system's CA certificates"
                .into(),
        ));
    }
    Ok(store)
}

/// `prefer` and `require` without roots, as libpq: the session is encrypted and its handshake
/// signatures checked, but the server's certificate is not authenticated.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name may be any.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn url_tls_options_are_taken_out() {
        let info = parse(
            "postgres://u@db.example:5433/app?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&application_name=x",
            no_env,
        )
        .unwrap();
        assert_eq!(info.ssl_mode, SslMode::VerifyFull);
        assert_eq!(info.root_cert, Some(PathBuf::from("/tmp/ca.pem")));
        assert_eq!(info.config.get_ports(), &[5433]);
        assert_eq!(info.config.get_application_name(), Some("x"));
        assert_eq!(info.config.get_ssl_mode(), WireSslMode::Require);
    }

    #[test]
    fn other_url_parameters_are_kept_as_written() {
        let info = parse(
            "postgres://u@h/db?options=-c%20search_path%3Dapp&sslmode=require",
            no_env,
        )
        .unwrap();
        assert_eq!(info.config.get_options(), Some("-c search_path=app"));
        assert_eq!(info.ssl_mode, SslMode::Require);
    }

    #[test]
    fn verify_ca_needs_its_own_root() {
        let info = parse("postgres://u@h/db?sslmode=verify-ca", no_env).unwrap();
        let message = tls(&info).err().unwrap().to_string();
        assert!(message.contains("sslrootcert"), "{message}");
        let info = parse(
            "postgres://u@h/db?sslmode=verify-ca&sslrootcert=system",
            no_env,
        )
        .unwrap();
        assert!(tls(&info).is_err());
    }

    #[test]
    fn verify_ca_with_a_root_file_is_set_up() {
        let bundle = "/etc/ssl/certs/ca-certificates.crt";
        if !std::path::Path::new(bundle).exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI installs the CA bundle"
            );
            return;
        }
        for conninfo in [
            format!("postgres://u@h/db?sslmode=verify-ca&sslrootcert={bundle}"),
            format!("host=h sslmode=verify-ca sslrootcert={bundle}"),
        ] {
            let info = parse(&conninfo, no_env).unwrap();
            assert_eq!(info.root_cert, Some(PathBuf::from(bundle)), "{conninfo}");
            assert!(tls(&info).is_ok(), "{conninfo}");
        }
        let missing = parse(
            "host=h sslmode=verify-full sslrootcert=/nonexistent.pem",
            no_env,
        );
        let message = tls(&missing.unwrap()).err().unwrap().to_string();
        assert!(message.contains("/nonexistent.pem"), "{message}");
    }

    #[test]
    fn a_zero_connect_timeout_waits() {
        let info = parse("", |name| {
            (name == "PGCONNECT_TIMEOUT").then(|| "0".to_owned())
        })
        .unwrap();
        assert_eq!(info.config.get_connect_timeout(), None);
        let info = parse("", no_env).unwrap();
        assert_eq!(
            info.config.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(10))
        );
    }

    #[test]
    fn key_value_form_with_quotes() {
        let info = parse(
            "host=localhost dbname='my app' password='it\\'s' sslmode=verify-ca",
            no_env,
        )
        .unwrap();
        assert_eq!(info.ssl_mode, SslMode::VerifyCa);
        assert_eq!(info.config.get_dbname(), Some("my app"));
        assert_eq!(info.config.get_password(), Some(&b"it's"[..]));
    }

    #[test]
    fn the_environment_fills_what_the_string_leaves_out() {
        let env = |name: &str| match name {
            "PGHOST" => Some("pg.internal".to_owned()),
            "PGPORT" => Some("6543".to_owned()),
            "PGUSER" => Some("svc".to_owned()),
            "PGPASSWORD" => Some("secret".to_owned()),
            "PGDATABASE" => Some("state".to_owned()),
            "PGSSLMODE" => Some("require".to_owned()),
            _ => None,
        };
        let info = parse("", env).unwrap();
        assert_eq!(info.config.get_ports(), &[6543]);
        assert_eq!(info.config.get_user(), Some("svc"));
        assert_eq!(info.config.get_password(), Some(&b"secret"[..]));
        assert_eq!(info.config.get_dbname(), Some("state"));
        assert_eq!(info.ssl_mode, SslMode::Require);
        // The string wins over the environment.
        let info = parse("postgres://me@h/db?sslmode=disable", env).unwrap();
        assert_eq!(info.config.get_user(), Some("me"));
        assert_eq!(info.config.get_dbname(), Some("db"));
        assert_eq!(info.ssl_mode, SslMode::Disable);
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        let message = |conninfo: &str| parse(conninfo, no_env).err().unwrap().to_string();
        assert!(message("postgres://h/db?sslmode=maybe").contains("sslmode \"maybe\""));
        assert!(message("host").contains("has no value"));
        assert!(message("password='open").contains("no closing quote"));
        assert!(message("postgres://h:notaport/db").contains("not valid"));
        let bad_port = parse("", |name| (name == "PGPORT").then(|| "x".to_owned()));
        assert!(bad_port.err().unwrap().to_string().contains("PGPORT"));
    }
}
