//! Fetching the identity provider's JWKS over HTTPS: one GET on a fresh
//! TLS connection (rustls with ring; Mozilla's roots, plus the PEM
//! certificates of `user_jwks_ca_file` for a private CA), at most 1 MiB,
//! within 10 s. Plain HTTP is refused: keys that decide who a buyer is must
//! not come over a channel anyone on the path can rewrite.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::Uri;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::sync::Arc;
use std::time::Duration;

/// The most a JWKS may weigh.
const MAX_BYTES: usize = 1 << 20;
/// The longest a fetch may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A JWKS URL and the TLS client that fetches it.
pub struct Fetcher {
    uri: Uri,
    host: String,
    port: u16,
    tls: tokio_rustls::TlsConnector,
}

impl Fetcher {
    /// Checks the URL (https, a host) and builds the TLS client.
    pub fn new(url: &str, ca_file: Option<&str>) -> anyhow::Result<Self> {
        let uri: Uri = url.parse().map_err(|e| anyhow::anyhow!("SECKILL_USER_JWKS {url}: {e}"))?;
        if uri.scheme_str() != Some("https") {
            anyhow::bail!("SECKILL_USER_JWKS {url}: only https URLs are fetched");
        }
        let host = uri.host().ok_or_else(|| anyhow::anyhow!("SECKILL_USER_JWKS {url}: no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = uri.port_u16().unwrap_or(443);
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(ca_file) = ca_file {
            for cert in CertificateDer::pem_file_iter(ca_file)
                .map_err(|e| anyhow::anyhow!("user_jwks_ca_file {ca_file}: {e}"))?
            {
                let cert = cert.map_err(|e| anyhow::anyhow!("user_jwks_ca_file {ca_file}: {e}"))?;
                roots.add(cert).map_err(|e| anyhow::anyhow!("user_jwks_ca_file {ca_file}: {e}"))?;
            }
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self { uri, host, port, tls: tokio_rustls::TlsConnector::from(Arc::new(config)) })
    }

    /// The URL, for messages.
    pub fn url(&self) -> String {
        self.uri.to_string()
    }

    /// One GET of the JWKS: its body, or why not.
    pub async fn fetch(&self) -> anyhow::Result<Bytes> {
        tokio::time::timeout(TIMEOUT, self.get()).await.map_err(|_| anyhow::anyhow!("no answer within {TIMEOUT:?}"))?
    }

    async fn get(&self) -> anyhow::Result<Bytes> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await?;
        let name = ServerName::try_from(self.host.clone())?;
        let tls = self.tls.connect(name, tcp).await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        let path = self.uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = self.uri.authority().map_or(self.host.as_str(), |a| a.as_str());
        let request = hyper::Request::get(path)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::USER_AGENT, "seckill-edge")
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        if !response.status().is_success() {
            anyhow::bail!("answered {}", response.status());
        }
        let body = Limited::new(response.into_body(), MAX_BYTES)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the body: {e}"))?;
        Ok(body.to_bytes())
    }
}
