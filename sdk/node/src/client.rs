//! The client: `connect` (a server) and `open` (an embedded data directory), and the
//! admin calls that are not a topic's.

use std::time::Duration;

use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;
use rill_client::{
    Client, ClientBuilder, ClientError, Credentials, RetryPolicy, Secret, TlsOptions,
};

use crate::convert::{config_json, description_json, positive_ms};
use crate::error::{invalid, to_napi};
use crate::runtime::spawn;
use crate::topic::NativeTopic;

/// Options of a client, as `Rill.connect` and `Rill.open` take them.
#[napi(object)]
#[derive(Debug, Default)]
pub struct ClientOptions {
    pub default_stream: Option<String>,
    pub connect_timeout_ms: Option<u32>,
    pub init_retries: Option<u32>,
    pub init_interval_ms: Option<u32>,
    pub retries: Option<u32>,
    pub backoff_ms: Option<u32>,
    pub backoff_max_ms: Option<u32>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    pub tls_ca_file: Option<String>,
    pub tls_cert_file: Option<String>,
    pub tls_key_file: Option<String>,
}

fn ms(n: u32) -> Duration {
    Duration::from_millis(u64::from(n))
}

fn builder(o: ClientOptions, remote: bool) -> Result<ClientBuilder, ClientError> {
    let mut b = Client::builder();
    if let Some(s) = o.default_stream {
        b = b.default_stream(s);
    }
    if !remote {
        let network = o.connect_timeout_ms.is_some()
            || o.init_retries.is_some()
            || o.init_interval_ms.is_some()
            || o.user.is_some()
            || o.password.is_some()
            || o.token.is_some()
            || o.tls_ca_file.is_some()
            || o.tls_cert_file.is_some()
            || o.tls_key_file.is_some();
        if network {
            return Err(invalid(
                "connection options (timeouts, credentials, TLS) go with Rill.connect, not Rill.open",
            ));
        }
    }
    if let Some(t) = o.connect_timeout_ms {
        b = b.connect_timeout(positive_ms("connectTimeoutMs", t)?);
    }
    if o.init_retries.is_some() || o.init_interval_ms.is_some() {
        b = b.init_retries(
            o.init_retries.unwrap_or(3),
            ms(o.init_interval_ms.unwrap_or(1000)),
        );
    }
    if o.retries.is_some() || o.backoff_ms.is_some() || o.backoff_max_ms.is_some() {
        let default = RetryPolicy::default();
        let backoff = o.backoff_ms.map_or(default.backoff, ms);
        let backoff_max = o.backoff_max_ms.map_or(default.backoff_max, ms);
        if backoff_max < backoff {
            return Err(invalid("backoffMaxMs must be at least backoffMs"));
        }
        b = b.retry(RetryPolicy {
            retries: o.retries.unwrap_or(default.retries),
            backoff,
            backoff_max,
        });
    }
    b = match (o.user, o.password, o.token) {
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
    match (o.tls_ca_file, o.tls_cert_file, o.tls_key_file) {
        (None, None, None) => {}
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
                        "a client certificate needs both tlsCertFile and tlsKeyFile",
                    ));
                }
            };
            b = b.tls(tls);
        }
    }
    Ok(b)
}

/// A Rill client (`rill_client::Client`): one handle for every stream, over TCP or an
/// embedded broker. `close()` closes it for every user.
#[napi]
#[derive(Debug)]
pub struct NativeClient {
    client: Client,
}

/// Connects to `rill://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]` or `rills://...`.
#[napi(catch_unwind)]
pub fn connect<'env>(
    env: &'env Env,
    url: String,
    options: Option<ClientOptions>,
) -> napi::Result<PromiseRaw<'env, NativeClient>> {
    let builder = builder(options.unwrap_or_default(), true).map_err(to_napi)?;
    spawn(env, async move {
        let client = builder.connect(&url).await?;
        Ok(NativeClient { client })
    })
}

/// Opens a data directory with an in-process broker: the same API, no server.
#[napi(catch_unwind)]
pub fn open<'env>(
    env: &'env Env,
    path: String,
    options: Option<ClientOptions>,
) -> napi::Result<PromiseRaw<'env, NativeClient>> {
    let builder = builder(options.unwrap_or_default(), false).map_err(to_napi)?;
    spawn(env, async move {
        let client = builder.open(path).await?;
        Ok(NativeClient { client })
    })
}

#[napi]
impl NativeClient {
    /// The topic `topic` of stream `stream`.
    #[napi(catch_unwind)]
    pub fn topic(&self, stream: String, topic: String) -> NativeTopic {
        NativeTopic::new(self.client.stream(stream).topic(topic))
    }

    /// The stream used when none is named.
    #[napi(getter)]
    pub fn default_stream(&self) -> String {
        self.client.topic("_").stream_name().to_owned()
    }

    /// Whether this client runs an embedded broker.
    #[napi(getter)]
    pub fn is_embedded(&self) -> bool {
        self.client.is_embedded()
    }

    /// Whether `close()` was called.
    #[napi(getter)]
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Closes the connection or the embedded broker; later calls fail with `ClosedError`.
    #[napi]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let client = self.client.clone();
        spawn(env, async move { Ok(client.close().await?) })
    }

    /// Creates a stream; with `ifMissing` an existing one is fine. Whether it was created.
    #[napi]
    pub fn create_stream<'env>(
        &self,
        env: &'env Env,
        name: String,
        if_missing: bool,
    ) -> napi::Result<PromiseRaw<'env, bool>> {
        let client = self.client.clone();
        spawn(env, async move {
            Ok(client.create_stream(&name, if_missing).await?)
        })
    }

    /// Deletes a stream and its topics.
    #[napi]
    pub fn delete_stream<'env>(
        &self,
        env: &'env Env,
        name: String,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let client = self.client.clone();
        spawn(env, async move { Ok(client.delete_stream(&name).await?) })
    }

    /// Streams, as JSON `[{name, topics}]`.
    #[napi]
    pub fn list_streams<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, String>> {
        let client = self.client.clone();
        spawn(env, async move {
            let streams: Vec<serde_json::Value> = client
                .list_streams()
                .await?
                .into_iter()
                .map(|s| serde_json::json!({ "name": s.name, "topics": s.topics }))
                .collect();
            Ok(serde_json::Value::from(streams).to_string())
        })
    }

    /// Topics of `stream` (every stream's without one), as JSON `[{stream, name, config}]`.
    #[napi]
    pub fn list_topics<'env>(
        &self,
        env: &'env Env,
        stream: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let client = self.client.clone();
        spawn(env, async move {
            let topics: Vec<serde_json::Value> = client
                .list_topics(stream.as_deref())
                .await?
                .into_iter()
                .map(|t| {
                    serde_json::json!({
                        "stream": t.stream, "name": t.name, "config": config_json(&t.config),
                    })
                })
                .collect();
            Ok(serde_json::Value::from(topics).to_string())
        })
    }

    /// A topic's options and partitions, as JSON.
    #[napi]
    pub fn describe_topic<'env>(
        &self,
        env: &'env Env,
        stream: String,
        topic: String,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let client = self.client.clone();
        spawn(env, async move {
            let d = client.describe_topic(&stream, &topic).await?;
            Ok(description_json(&d).to_string())
        })
    }
}
