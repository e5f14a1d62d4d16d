//! The Rust SDK's errors as JavaScript errors: a native call fails with a `napi::Error`
//! whose reason is [`MARKER`] and a JSON description (`kind`, `code`, `message`,
//! `transient` and the variant's fields); `index.cjs` turns it into the `RillError`
//! subclass of that kind. An error without the marker (a value napi could not convert)
//! is an `InvalidArgumentError` there.

use std::any::Any;

use rill_client::ClientError;
use serde_json::{Value, json};

/// Starts the reason of every error this addon makes, so the JS layer can tell it from
/// napi's own.
pub(crate) const MARKER: &str = "\u{1}rill-error:";

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The `kind` (the `ClientError` variant), the protocol code's name, and the fields.
fn shape(error: &ClientError) -> (&'static str, Option<&'static str>, Value) {
    match error {
        ClientError::Server { code, offset, .. } => (
            "Server",
            Some(code.name()),
            json!({ "offset": offset, "wireCode": code.wire() }),
        ),
        ClientError::DataLoss {
            partition,
            from,
            to,
            ..
        } => (
            "DataLoss",
            Some("DATA_LOSS"),
            json!({ "partition": partition, "fromOffset": from, "toOffset": to }),
        ),
        ClientError::Connection { addr, .. } => (
            "Connection",
            None,
            json!({ "addr": rill_client::redact_url(addr) }),
        ),
        ClientError::Indeterminate(_) => ("Indeterminate", None, json!({})),
        ClientError::Protocol(_) => ("Protocol", None, json!({})),
        ClientError::InvalidUrl { url, .. } => (
            "InvalidUrl",
            None,
            json!({ "url": rill_client::redact_url(url) }),
        ),
        ClientError::InvalidArgument(_) => ("InvalidArgument", None, json!({})),
        ClientError::Encode(_) => ("Encode", None, json!({})),
        ClientError::Decode {
            partition,
            offset,
            reason,
        } => (
            "Decode",
            None,
            json!({ "partition": partition, "offset": offset, "reason": reason }),
        ),
        ClientError::InvalidBatch(_) => ("InvalidBatch", None, json!({})),
        ClientError::Corrupt {
            partition,
            from,
            to,
            ..
        } => (
            "Corrupt",
            None,
            json!({ "partition": partition, "fromOffset": from, "toOffset": to }),
        ),
        ClientError::Timeout(d) => ("Timeout", None, json!({ "timeoutMs": millis(*d) })),
        ClientError::Embedded(e) => (
            "Embedded",
            None,
            json!({ "brokerCode": e.code().as_str_name() }),
        ),
        ClientError::Shutdown => ("Shutdown", None, json!({})),
        ClientError::Closed => ("Closed", None, json!({})),
        ClientError::Poisoned { .. } => ("Poisoned", None, json!({})),
        ClientError::BufferFull => ("BufferFull", None, json!({})),
        ClientError::EpochsExhausted { partition } => {
            ("EpochsExhausted", None, json!({ "partition": partition }))
        }
        ClientError::Background(_) => ("Background", None, json!({})),
        // `ClientError` is non-exhaustive: a variant added later is still a RillError.
        _ => ("Unknown", None, json!({})),
    }
}

fn encode(
    kind: &str,
    code: Option<&str>,
    message: &str,
    transient: bool,
    fields: Value,
) -> napi::Error {
    let body = json!({
        "kind": kind,
        "code": code,
        "message": message,
        "transient": transient,
        "fields": fields,
    });
    napi::Error::from_reason(format!("{MARKER}{body}"))
}

/// The JavaScript error of `error`.
pub(crate) fn to_napi(error: ClientError) -> napi::Error {
    let (kind, code, fields) = shape(&error);
    encode(kind, code, &error.to_string(), error.is_transient(), fields)
}

/// An `InvalidArgument` error saying `message`.
pub(crate) fn invalid(message: impl Into<String>) -> ClientError {
    ClientError::InvalidArgument(message.into())
}

/// The JavaScript `InvalidArgumentError` saying `message`.
pub(crate) fn invalid_napi(message: impl Into<String>) -> napi::Error {
    to_napi(invalid(message))
}

/// The JavaScript `PanicError` of a panic caught at the boundary: a panic must not
/// cross into Node (it would abort the process).
pub(crate) fn panic_to_napi(panic: &(dyn Any + Send)) -> napi::Error {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    let message = format!("the Rill SDK panicked (a bug): {what}");
    encode("Panic", None, &message, false, json!({}))
}

/// The JavaScript error of a call ended by its `AbortSignal` (an `AbortError`).
pub(crate) fn aborted_napi() -> napi::Error {
    encode(
        "Aborted",
        None,
        "the operation was aborted",
        false,
        json!({}),
    )
}

/// The marked reason of `error`, for errors handed to JS inside a result.
pub(crate) fn to_reason(error: ClientError) -> String {
    to_napi(error).reason
}
