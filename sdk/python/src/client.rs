//! The client: `connect` (a server) and `open` (an embedded data directory), and the
//! admin calls that are not a topic's.

use std::time::Duration;

use pyo3::prelude::*;
use rill_client::{Client, ClientBuilder, Credentials, RetryPolicy, Secret, TlsOptions};

use crate::convert::{PyTopicConfig, PyTopicDescription};
use crate::error::{invalid, to_py};
use crate::runtime::spawn;
use crate::topic::PyTopic;

/// A Rill client (`rill_client::Client`): one handle for every stream, over TCP or an
/// embedded broker. Cheap to share; `close()` closes it for every user.
#[pyclass(frozen, module = "rill._native", name = "Client")]
#[derive(Debug)]
pub(crate) struct PyClient {
    pub(crate) client: Client,
}

/// Options of a client, as `connect` and `open` take them.
#[derive(Debug, Default)]
struct Options {
    default_stream: Option<String>,
    connect_timeout_ms: Option<u64>,
    init_retries: Option<u32>,
    init_interval_ms: Option<u64>,
    retries: Option<u32>,
    backoff_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
}

impl Options {
    fn builder(&self) -> Result<ClientBuilder, rill_client::ClientError> {
        let mut b = Client::builder();
        if let Some(s) = &self.default_stream {
            b = b.default_stream(s.clone());
        }
        if let Some(ms) = self.connect_timeout_ms {
            b = b.connect_timeout(crate::convert::positive_ms("connect_timeout_ms", ms)?);
        }
        if self.init_retries.is_some() || self.init_interval_ms.is_some() {
            b = b.init_retries(
                self.init_retries.unwrap_or(3),
                Duration::from_millis(self.init_interval_ms.unwrap_or(1000)),
            );
        }
        if self.retries.is_some() || self.backoff_ms.is_some() || self.backoff_max_ms.is_some() {
            let default = RetryPolicy::default();
            let backoff = self
                .backoff_ms
                .map_or(default.backoff, Duration::from_millis);
            let backoff_max = self
                .backoff_max_ms
                .map_or(default.backoff_max, Duration::from_millis);
            if backoff_max < backoff {
                return Err(invalid("backoff_max_ms must be at least backoff_ms"));
            }
            b = b.retry(RetryPolicy {
                retries: self.retries.unwrap_or(default.retries),
                backoff,
                backoff_max,
            });
        }
        Ok(b)
    }
}

/// Connects to a server at `rill://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]` or, with
/// TLS, `rills://...`. Credentials in the URL win over `user`/`password`/`token`.
#[pyfunction]
#[pyo3(signature = (
    url, *, default_stream=None, connect_timeout_ms=None, init_retries=None,
    init_interval_ms=None, retries=None, backoff_ms=None, backoff_max_ms=None,
    user=None, password=None, token=None, tls_ca_file=None, tls_cert_file=None,
    tls_key_file=None,
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect<'py>(
    py: Python<'py>,
    url: String,
    default_stream: Option<String>,
    connect_timeout_ms: Option<u64>,
    init_retries: Option<u32>,
    init_interval_ms: Option<u64>,
    retries: Option<u32>,
    backoff_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    tls_ca_file: Option<String>,
    tls_cert_file: Option<String>,
    tls_key_file: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = Options {
        default_stream,
        connect_timeout_ms,
        init_retries,
        init_interval_ms,
        retries,
        backoff_ms,
        backoff_max_ms,
    };
    let builder = (|| {
        let mut b = options.builder()?;
        b = match (user, password, token) {
            (Some(user), Some(password), None) => b.credentials(Credentials::Password {
                user,
                password: Secret::new(password),
            }),
            (None, None, Some(token)) => b.credentials(Credentials::Token(Secret::new(token))),
            (None, None, None) => b,
            _ => {
                return Err(invalid(
                    "give either user and password, or a token, or neither",
                ));
            }
        };
        let tls = match (tls_ca_file, tls_cert_file, tls_key_file) {
            (None, None, None) => None,
            (ca, cert, key) => {
                let mut tls = TlsOptions::new();
                if let Some(ca) = ca {
                    tls = tls.ca_file(ca)?;
                }
                tls = match (cert, key) {
                    (Some(cert), Some(key)) => tls.client_certificate_files(cert, key)?,
                    (None, None) => tls,
                    _ => {
                        return Err(invalid(
                            "a client certificate needs both tls_cert_file and tls_key_file",
                        ));
                    }
                };
                Some(tls)
            }
        };
        if let Some(tls) = tls {
            b = b.tls(tls);
        }
        Ok(b)
    })()
    .map_err(|e| to_py(py, e))?;
    spawn(py, async move {
        let client = builder.connect(&url).await?;
        Ok(PyClient { client })
    })
}

/// Opens a data directory with an in-process broker: the same API, no server.
#[pyfunction]
#[pyo3(signature = (path, *, default_stream=None, retries=None, backoff_ms=None, backoff_max_ms=None))]
pub(crate) fn open<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    default_stream: Option<String>,
    retries: Option<u32>,
    backoff_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = Options {
        default_stream,
        retries,
        backoff_ms,
        backoff_max_ms,
        ..Options::default()
    };
    let builder = options.builder().map_err(|e| to_py(py, e))?;
    spawn(py, async move {
        let client = builder.open(path).await?;
        Ok(PyClient { client })
    })
}

#[pymethods]
impl PyClient {
    /// The topic `topic` of stream `stream`.
    fn topic(&self, stream: String, topic: String) -> PyTopic {
        PyTopic::new(self.client.stream(stream).topic(topic))
    }

    /// The stream `Client.topic` uses when given no stream.
    #[getter]
    fn default_stream(&self) -> String {
        self.client.topic("_").stream_name().to_owned()
    }

    /// Whether this client runs an embedded broker.
    #[getter]
    fn is_embedded(&self) -> bool {
        self.client.is_embedded()
    }

    /// Whether `close()` was called.
    #[getter]
    fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Closes the client: the connection, or the embedded broker (synced, its directory
    /// let go). Every later call fails with `ClosedError`. Closing again does nothing.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        spawn(py, async move { client.close().await })
    }

    /// Creates a stream; with `if_missing` an existing one is fine. Whether it was
    /// created.
    fn create_stream<'py>(
        &self,
        py: Python<'py>,
        name: String,
        if_missing: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        spawn(
            py,
            async move { client.create_stream(&name, if_missing).await },
        )
    }

    /// Deletes a stream and its topics.
    fn delete_stream<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        spawn(py, async move { client.delete_stream(&name).await })
    }

    /// Streams as `[(name, topics)]`.
    fn list_streams<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        spawn(py, async move {
            Ok(client
                .list_streams()
                .await?
                .into_iter()
                .map(|s| (s.name, s.topics))
                .collect::<Vec<_>>())
        })
    }

    /// Topics of `stream` (every stream's with `None`) as `[(stream, name, config)]`.
    #[pyo3(signature = (stream=None))]
    fn list_topics<'py>(
        &self,
        py: Python<'py>,
        stream: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        spawn(py, async move {
            Ok(client
                .list_topics(stream.as_deref())
                .await?
                .into_iter()
                .map(|t| (t.stream, t.name, PyTopicConfig(t.config)))
                .collect::<Vec<_>>())
        })
    }

    /// A topic's options and partitions.
    fn describe_topic<'py>(
        &self,
        py: Python<'py>,
        stream: String,
        topic: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        spawn(py, async move {
            Ok(PyTopicDescription(
                client.describe_topic(&stream, &topic).await?,
            ))
        })
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.client)
    }
}
