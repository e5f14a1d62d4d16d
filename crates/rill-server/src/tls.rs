//! TLS on the client and HTTP listeners (docs/SECURITY.md §5): rustls through
//! tokio-rustls, with the `ring` provider.
//!
//! [`Tls`] holds the configuration in force. [`Tls::reload`] (on SIGHUP) reads the
//! files again and swaps it in for new connections; connections already open keep
//! theirs, and files that do not load leave the old configuration in force.
//!
//! Before anything else the server peeks at the first six bytes ([`sniff`]). A TLS
//! ClientHello starts `16 03 0x .. .. 01`: a handshake record, version 3.x, its length,
//! and handshake type 1. A Rill frame starts with its little-endian length and kind, and
//! its sixth byte is the high byte of the kind, 0 for every kind there is, so the two
//! never look alike. So a plaintext client on a TLS port is told in plaintext that the
//! port wants TLS, and a TLS client on a plaintext port gets a plaintext frame that its
//! TLS stack cannot read, and says so, instead of waiting for a frame that never ends.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Largest PEM file read (a certificate chain or key is a few KiB).
const PEM_BYTES_MAX: u64 = 1 << 20;
/// How long a client has to send its first byte and finish the handshake.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many bytes [`sniff`] looks at.
const SNIFF_BYTES: usize = 6;
/// Read-ahead under TLS. rustls asks the socket for 4 KiB at a time, so a 16 KiB
/// record costs several system calls; reading ahead makes one call carry several
/// records (docs/SECURITY.md §5).
const TLS_READ_AHEAD_BYTES: usize = 64 << 10;
/// How much encrypted output rustls holds before a write waits for the socket (its
/// default is 64 KiB): a fetch payload leaves in fewer, larger writes.
const TLS_WRITE_BUFFER_BYTES: usize = 256 << 10;

/// The socket under a TLS session: reads ahead, writes straight through.
pub(crate) type Wire = BufReader<TcpStream>;

/// Pause between peeks while fewer than [`SNIFF_BYTES`] have come (a peek returns at
/// once while any byte is buffered).
const SNIFF_PAUSE: Duration = Duration::from_millis(5);

/// What the first bytes of a connection look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sniffed {
    /// A TLS ClientHello.
    Tls,
    /// Anything else: a Rill frame, or garbage the framing will refuse.
    Plain,
    /// The client closed or failed.
    Gone,
    /// The client sent too little to decide for [`HANDSHAKE_TIMEOUT`].
    Quiet,
}

/// Whether `head` (the first bytes, possibly fewer than [`SNIFF_BYTES`]) is or may
/// still become a TLS ClientHello: `None` while undecided.
fn looks_like_tls(head: &[u8]) -> Option<bool> {
    let checks: [fn(u8) -> bool; SNIFF_BYTES] = [
        |b| b == 0x16,
        |b| b == 0x03,
        |b| b <= 0x04,
        |_| true,
        |_| true,
        |b| b == 0x01,
    ];
    for (byte, check) in head.iter().zip(checks) {
        if !check(*byte) {
            return Some(false);
        }
    }
    (head.len() >= SNIFF_BYTES).then_some(true)
}

/// Peeks at the first bytes of `socket` without taking them, until they decide.
pub(crate) async fn sniff(socket: &TcpStream) -> Sniffed {
    let work = async {
        let mut head = [0u8; SNIFF_BYTES];
        loop {
            match socket.peek(&mut head).await {
                Ok(0) | Err(_) => return Sniffed::Gone,
                Ok(n) => match looks_like_tls(&head[..n]) {
                    Some(true) => return Sniffed::Tls,
                    Some(false) => return Sniffed::Plain,
                    None => tokio::time::sleep(SNIFF_PAUSE).await,
                },
            }
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, work)
        .await
        .unwrap_or(Sniffed::Quiet)
}

/// Where the server's TLS files are: PEM files, read at start and on every reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With it, every client must present a certificate signed by one of these CAs. A
    /// client certificate whose subject common name is a user authenticates the
    /// connection as that user.
    pub client_ca: Option<PathBuf>,
}

/// Why TLS files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file is larger than a PEM file of certificates or keys can be.
    #[error("{path} is larger than 1 MiB; is it a PEM file?")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A file holds no PEM item of the kind expected.
    #[error("{path} holds no {what} in PEM form")]
    Missing {
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: &'static str,
    },
    /// A PEM item could not be decoded.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// rustls's words.
        reason: String,
    },
    /// rustls refused the certificate, key or CA (a key that does not match the
    /// certificate, an unsupported algorithm).
    #[error("the TLS configuration is refused: {0}")]
    Config(String),
}

/// The TLS configuration of a server, reloadable.
#[derive(Debug)]
pub struct Tls {
    settings: TlsSettings,
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl Tls {
    /// Reads the files of `settings`.
    pub fn load(settings: TlsSettings) -> Result<Self, TlsError> {
        let config = server_config(&settings)?;
        Ok(Self {
            settings,
            current: RwLock::new(config),
        })
    }

    /// Reads the files again and uses them for new connections. If they do not load,
    /// the configuration in force stays and the error is returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.settings)?;
        *self.current.write() = config;
        Ok(())
    }

    /// Whether client certificates are required.
    pub fn requires_client_certificates(&self) -> bool {
        self.settings.client_ca.is_some()
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.current.read()))
    }
}

fn read_pem_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    let read = |source| TlsError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let len = file.metadata().map_err(read)?.len();
    if len > PEM_BYTES_MAX {
        return Err(TlsError::TooLarge {
            path: path.to_owned(),
        });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    io::Read::read_to_end(&mut io::Read::take(file, PEM_BYTES_MAX + 1), &mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > PEM_BYTES_MAX {
        return Err(TlsError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Missing {
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_pem_file(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Missing {
            path: path.to_owned(),
            what: "private key",
        },
        e => TlsError::Pem {
            path: path.to_owned(),
            reason: e.to_string(),
        },
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(settings: &TlsSettings) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(&settings.cert)?;
    let key = private_key(&settings.key)?;
    let config = |e: rustls::Error| TlsError::Config(e.to_string());
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config)?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in certificates(path)? {
                roots.add(ca).map_err(config)?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(config)?;
    Ok(Arc::new(config))
}

/// How a connection to a TLS port began.
pub(crate) enum Accepted {
    /// A TLS session; with the client certificate's subject common name, if the client
    /// presented one.
    Tls(Box<TlsStream<Wire>>, Option<String>),
    /// The first byte was not a TLS handshake: the caller answers in plaintext.
    Plaintext(TcpStream),
    /// The client left, timed out or failed the handshake (logged here).
    Gone,
}

/// Sniffs the first bytes, then runs the handshake, within [`HANDSHAKE_TIMEOUT`].
pub(crate) async fn accept(tls: &Tls, socket: TcpStream, peer: std::net::SocketAddr) -> Accepted {
    let acceptor = tls.acceptor();
    let work = async move {
        match sniff(&socket).await {
            Sniffed::Gone | Sniffed::Quiet => return Accepted::Gone,
            Sniffed::Plain => return Accepted::Plaintext(socket),
            Sniffed::Tls => {}
        }
        let wire = BufReader::with_capacity(TLS_READ_AHEAD_BYTES, socket);
        match acceptor.accept(wire).await {
            Ok(mut stream) => {
                stream
                    .get_mut()
                    .1
                    .set_buffer_limit(Some(TLS_WRITE_BUFFER_BYTES));
                let name = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|leaf| common_name(leaf));
                Accepted::Tls(Box::new(stream), name)
            }
            Err(e) => {
                tracing::info!(%peer, error = %e, "TLS handshake failed");
                Accepted::Gone
            }
        }
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, work).await {
        Ok(accepted) => accepted,
        Err(_) => {
            tracing::info!(%peer, "TLS handshake timed out");
            Accepted::Gone
        }
    }
}

/// The subject common name of a certificate, if it has one in UTF-8.
fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn loads_a_certificate_and_reports_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_path = write(dir.path(), "cert.pem", &cert.pem());
        let key_path = write(dir.path(), "key.pem", &key.serialize_pem());
        let tls = Tls::load(TlsSettings {
            cert: cert_path.clone(),
            key: key_path.clone(),
            client_ca: Some(cert_path.clone()),
        })
        .unwrap();
        assert!(tls.requires_client_certificates());
        tls.reload().unwrap();

        let garbage = write(dir.path(), "garbage.pem", "not a pem file\n");
        let other = rcgen::KeyPair::generate().unwrap();
        let other_key = write(dir.path(), "other.pem", &other.serialize_pem());
        for (cert, key, expect) in [
            (garbage.clone(), key_path.clone(), "holds no certificate"),
            (cert_path.clone(), garbage, "holds no private key"),
            (dir.path().join("absent.pem"), key_path, "cannot read"),
            (cert_path.clone(), other_key, "refused"),
        ] {
            let e = Tls::load(TlsSettings {
                cert,
                key,
                client_ca: None,
            })
            .unwrap_err();
            assert!(e.to_string().contains(expect), "{e}");
        }
        // A reload whose files went bad keeps the configuration in force.
        std::fs::write(&cert_path, "gone bad").unwrap();
        assert!(tls.reload().is_err());
        let _still = tls.acceptor();
    }

    #[test]
    fn a_client_hello_is_told_from_a_frame() {
        let hello = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00];
        assert_eq!(looks_like_tls(&hello), Some(true));
        assert_eq!(looks_like_tls(&hello[..3]), None);
        assert_eq!(looks_like_tls(&[]), None);
        // A Rill frame 790 bytes long (16 03 00 00) of kind 5, version 1.
        assert_eq!(
            looks_like_tls(&[0x16, 0x03, 0x00, 0x00, 0x05, 0x00, 0x01]),
            Some(false)
        );
        // A Hello frame: a small length, then zeros.
        assert_eq!(looks_like_tls(&[0x2a, 0x00]), Some(false));
        assert_eq!(looks_like_tls(&[0x16, 0x00]), Some(false));
        assert_eq!(looks_like_tls(&[0x16, 0x03, 0x07]), Some(false));
    }

    #[test]
    fn common_name_is_read() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["client".into()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(common_name(cert.der()).as_deref(), Some("alice"));
        let mut bare = rcgen::CertificateParams::new(vec!["client".into()]).unwrap();
        bare.distinguished_name = rcgen::DistinguishedName::new();
        let bare = bare.self_signed(&key).unwrap();
        assert_eq!(common_name(bare.der()), None);
        assert_eq!(common_name(&CertificateDer::from(vec![1, 2, 3])), None);
    }
}
