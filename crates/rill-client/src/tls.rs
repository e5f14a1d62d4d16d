//! TLS to a server (`rills://`, docs/SECURITY.md §5): rustls through tokio-rustls, with
//! the `ring` provider.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::ClientError;

/// Largest PEM file read.
const PEM_BYTES_MAX: u64 = 1 << 20;
/// Read-ahead under TLS: rustls asks the socket for 4 KiB at a time, so without it a
/// 16 KiB record costs several system calls.
const TLS_READ_AHEAD_BYTES: usize = 64 << 10;
/// How much encrypted output rustls holds before a write waits for the socket (its
/// default is 64 KiB): a produce batch leaves in fewer, larger writes.
const TLS_WRITE_BUFFER_BYTES: usize = 256 << 10;

/// The socket under a TLS session: reads ahead, writes straight through.
pub(crate) type Wire = BufReader<TcpStream>;

/// How a client speaks TLS to `rills://` servers: which certificate authorities it
/// trusts (the Mozilla roots of `webpki-roots` unless [`TlsOptions::ca_pem`] or
/// [`TlsOptions::ca_file`] names a private one, which then replaces them, as `curl
/// --cacert` does), and the client certificate it presents, if the server asks for one.
#[derive(Clone)]
pub struct TlsOptions {
    roots: rustls::RootCertStore,
    identity: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field("roots", &self.roots.len())
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

impl Default for TlsOptions {
    fn default() -> Self {
        Self::new()
    }
}

fn invalid(what: impl fmt::Display) -> ClientError {
    ClientError::InvalidArgument(format!("TLS: {what}"))
}

fn read_pem(path: &Path) -> Result<Vec<u8>, ClientError> {
    let bad = |e: std::io::Error| invalid(format!("cannot read {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(bad)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, PEM_BYTES_MAX + 1),
        &mut bytes,
    )
    .map_err(bad)?;
    if bytes.len() as u64 > PEM_BYTES_MAX {
        return Err(invalid(format!(
            "{} is larger than 1 MiB; is it a PEM file?",
            path.display()
        )));
    }
    Ok(bytes)
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("{what}: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(format!("{what} holds no certificate in PEM form")));
    }
    Ok(certs)
}

impl TlsOptions {
    /// Trusts the Mozilla root certificates (`webpki-roots`), presents no client
    /// certificate.
    pub fn new() -> Self {
        Self {
            roots: rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
            identity: None,
        }
    }

    /// Trusts the certificate authorities of a PEM text instead of the public roots.
    pub fn ca_pem(mut self, pem: &[u8]) -> Result<Self, ClientError> {
        let mut roots = rustls::RootCertStore::empty();
        for ca in certificates(pem, "the CA file")? {
            roots
                .add(ca)
                .map_err(|e| invalid(format!("the CA certificate is refused: {e}")))?;
        }
        self.roots = roots;
        Ok(self)
    }

    /// [`TlsOptions::ca_pem`] from a file (`--tls-ca FILE`, `RILL_TLS_CA`).
    pub fn ca_file(self, path: impl AsRef<Path>) -> Result<Self, ClientError> {
        let pem = read_pem(path.as_ref())?;
        self.ca_pem(&pem)
            .map_err(|e| invalid(format!("{}: {e}", path.as_ref().display())))
    }

    /// Presents this certificate chain (leaf first) and key when the server asks for a
    /// client certificate; one whose subject common name is a user authenticates as it.
    pub fn client_certificate_pem(
        mut self,
        chain_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<Self, ClientError> {
        let chain = certificates(chain_pem, "the client certificate")?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| invalid(format!("the client key: {e}")))?;
        self.identity = Some((chain, Arc::new(key)));
        Ok(self)
    }

    /// [`TlsOptions::client_certificate_pem`] from files.
    pub fn client_certificate_files(
        self,
        chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self, ClientError> {
        let chain = read_pem(chain.as_ref())?;
        let key = read_pem(key.as_ref())?;
        self.client_certificate_pem(&chain, &key)
    }

    /// The connector these options make.
    pub(crate) fn connector(&self) -> Result<Connector, ClientError> {
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(invalid)?
        .with_root_certificates(self.roots.clone());
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(|e| invalid(format!("the client certificate is refused: {e}")))?,
        };
        Ok(Connector(TlsConnector::from(Arc::new(config))))
    }
}

/// A ready TLS client configuration, shared by a client's connections.
#[derive(Clone)]
pub(crate) struct Connector(TlsConnector);

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Connector")
    }
}

/// Why a TLS connection could not be made: whether to retry it, and what to say.
pub(crate) enum TlsFailure {
    /// The network failed: another attempt may work.
    Io(String),
    /// The server's certificate, or what it answered, will not change on a retry.
    Refused(String),
}

impl Connector {
    /// The handshake over `stream` with the server `addr` (`HOST:PORT`), whose host
    /// the certificate must name.
    pub(crate) async fn connect(
        &self,
        addr: &str,
        stream: TcpStream,
    ) -> Result<TlsStream<Wire>, TlsFailure> {
        let host = host_of(addr);
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| TlsFailure::Refused(format!("{host:?} is not a valid TLS server name")))?;
        let mut stream = self
            .0
            .connect(name, BufReader::with_capacity(TLS_READ_AHEAD_BYTES, stream))
            .await
            .map_err(|e| explain(host, &e))?;
        stream
            .get_mut()
            .1
            .set_buffer_limit(Some(TLS_WRITE_BUFFER_BYTES));
        Ok(stream)
    }
}

/// The host of `HOST:PORT`, without an IPv6 address's brackets.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Words for a failed read, and whether a retry cannot help: a TLS alert after the
/// handshake is the server refusing the client's certificate (TLS 1.3 checks it once the
/// client has finished).
pub(crate) fn describe_read_error(e: &std::io::Error) -> (String, bool) {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::AlertReceived(alert)) => (
            format!(
                "the server refused the TLS session ({alert:?}): it requires a client \
             certificate signed by a CA it trusts (RILL_TLS_CLIENT_CERT and \
             RILL_TLS_CLIENT_KEY, TlsOptions::client_certificate_files in the SDK)"
            ),
            true,
        ),
        _ => (e.to_string(), false),
    }
}

/// Words for a failed handshake that tell the user what to do.
fn explain(host: &str, e: &std::io::Error) -> TlsFailure {
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return match e.kind() {
            // A plaintext Rill server reads the ClientHello as a frame too large and
            // closes, or answers in plaintext.
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                TlsFailure::Refused(format!(
                    "the server at {host} did not answer with TLS (is it a rill:// port?): {e}"
                ))
            }
            _ => TlsFailure::Io(e.to_string()),
        };
    };
    let message = match tls {
        rustls::Error::InvalidCertificate(why) => format!(
            "the server's certificate for {host} is not trusted ({why:?}); trust its CA \
             with --tls-ca FILE or RILL_TLS_CA (TlsOptions::ca_file in the SDK)"
        ),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("the server at {host} did not answer with TLS (is it a rill:// port?): {tls}")
        }
        rustls::Error::AlertReceived(alert) => format!(
            "the server at {host} refused the TLS handshake ({alert:?}); it may require a \
             client certificate signed by a CA it trusts"
        ),
        other => format!("TLS handshake with {host} failed: {other}"),
    };
    TlsFailure::Refused(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_taken_from_addresses() {
        assert_eq!(host_of("localhost:7171"), "localhost");
        assert_eq!(host_of("[::1]:7171"), "::1");
        assert_eq!(host_of("10.0.0.1:1"), "10.0.0.1");
    }

    #[test]
    fn bad_pem_is_refused_with_words() {
        let e = TlsOptions::new().ca_pem(b"nothing here").unwrap_err();
        assert!(e.to_string().contains("holds no certificate"), "{e}");
        let e = TlsOptions::new()
            .ca_file("/nonexistent/ca.pem")
            .unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
        assert!(TlsOptions::new().connector().is_ok());
    }
}
