//! The Rust SDK's errors as Python exceptions: one class of `rill.errors` per
//! `ClientError` variant, and per `ErrorCode` for errors the broker answered with.
//!
//! The classes are defined in Python (`python/rill/errors.py`) so that they can also
//! derive from builtins (`ConnectionError`, `TimeoutError`, `ValueError`); this module
//! looks them up by name and fills in their fields.

use std::any::Any;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use rill_client::{ClientError, ErrorCode};

/// An error value of a field of an exception.
enum Field {
    Str(String),
    U64(u64),
    OptU64(Option<u64>),
    I64(i64),
    F64(f64),
}

impl Field {
    fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        Ok(match self {
            Field::Str(s) => s.into_pyobject(py)?.into_any(),
            Field::U64(n) => n.into_pyobject(py)?.into_any(),
            Field::OptU64(n) => n.into_pyobject(py)?.into_any(),
            Field::I64(n) => n.into_pyobject(py)?.into_any(),
            Field::F64(n) => n.into_pyobject(py)?.into_any(),
        })
    }
}

/// Which class of `rill.errors` an error is, and the fields it carries.
struct Shape {
    /// A class name of `rill.errors`, or `None` for the class of `code`.
    class: Option<&'static str>,
    /// The protocol error code's name, for server errors.
    code: Option<&'static str>,
    fields: Vec<(&'static str, Field)>,
}

fn shape(error: &ClientError) -> Shape {
    let class = |name| Shape {
        class: Some(name),
        code: None,
        fields: Vec::new(),
    };
    match error {
        ClientError::Server { code, offset, .. } => Shape {
            class: None,
            code: Some(code.name()),
            fields: vec![
                ("offset", Field::OptU64(*offset)),
                ("wire_code", Field::I64(i64::from(code.wire()))),
            ],
        },
        ClientError::DataLoss {
            partition,
            from,
            to,
            ..
        } => Shape {
            class: Some("DataLossError"),
            code: Some(ErrorCode::DataLoss.name()),
            fields: vec![
                ("partition", Field::U64(u64::from(*partition))),
                ("from_offset", Field::U64(*from)),
                ("to_offset", Field::OptU64(*to)),
                (
                    "wire_code",
                    Field::I64(i64::from(ErrorCode::DataLoss.wire())),
                ),
            ],
        },
        ClientError::Connection { addr, .. } => Shape {
            fields: vec![("addr", Field::Str(addr.clone()))],
            ..class("ConnectionError")
        },
        ClientError::Indeterminate(_) => class("IndeterminateError"),
        ClientError::Protocol(_) => class("ProtocolError"),
        ClientError::InvalidUrl { url, .. } => Shape {
            fields: vec![("url", Field::Str(url.clone()))],
            ..class("InvalidUrlError")
        },
        ClientError::InvalidArgument(_) => class("InvalidArgumentError"),
        ClientError::Encode(_) => class("EncodeError"),
        ClientError::Decode {
            partition,
            offset,
            reason,
        } => Shape {
            fields: vec![
                ("partition", Field::U64(u64::from(*partition))),
                ("offset", Field::U64(*offset)),
                ("reason", Field::Str(reason.clone())),
            ],
            ..class("DecodeError")
        },
        ClientError::InvalidBatch(_) => class("MalformedBatchError"),
        ClientError::Corrupt {
            partition,
            from,
            to,
            ..
        } => Shape {
            fields: vec![
                ("partition", Field::U64(u64::from(*partition))),
                ("from_offset", Field::U64(*from)),
                ("to_offset", Field::U64(*to)),
            ],
            ..class("CorruptError")
        },
        ClientError::Timeout(d) => Shape {
            fields: vec![("timeout", Field::F64(d.as_secs_f64()))],
            ..class("TimeoutError")
        },
        ClientError::Embedded(e) => Shape {
            fields: vec![("broker_code", Field::Str(e.code().as_str_name().to_owned()))],
            ..class("EmbeddedError")
        },
        ClientError::Shutdown => class("ShutdownError"),
        ClientError::Closed => class("ClosedError"),
        ClientError::Poisoned { .. } => class("PoisonedError"),
        ClientError::BufferFull => class("BufferFullError"),
        ClientError::EpochsExhausted { partition } => Shape {
            fields: vec![("partition", Field::U64(u64::from(*partition)))],
            ..class("EpochsExhaustedError")
        },
        ClientError::Background(_) => class("BackgroundError"),
        // `ClientError` is non-exhaustive: a variant added later is still a RillError.
        _ => class("RillError"),
    }
}

/// The Python exception of `error`.
pub(crate) fn to_py(py: Python<'_>, error: ClientError) -> PyErr {
    let message = error.to_string();
    let transient = error.is_transient();
    build(py, shape(&error), &message, transient)
        .unwrap_or_else(|e| PyRuntimeError::new_err(format!("{message} (and {e})")))
}

fn build(py: Python<'_>, shape: Shape, message: &str, transient: bool) -> PyResult<PyErr> {
    let module = py.import("rill.errors")?;
    let class = match (shape.class, shape.code) {
        (Some(name), _) => module.getattr(name)?,
        (None, Some(code)) => module.call_method1("server_error_class", (code,))?,
        (None, None) => module.getattr("RillError")?,
    };
    let exception = class.call1((message,))?;
    if let Some(code) = shape.code {
        exception.setattr("code", code)?;
    }
    exception.setattr("transient", transient)?;
    for (name, value) in shape.fields {
        exception.setattr(name, value.into_py(py)?)?;
    }
    Ok(PyErr::from_value(exception))
}

/// An `InvalidArgumentError` saying `message`.
pub(crate) fn invalid(message: impl Into<String>) -> ClientError {
    ClientError::InvalidArgument(message.into())
}

/// The `rill.errors.InvalidArgumentError` saying `message`, raised at once.
pub(crate) fn invalid_py(py: Python<'_>, message: impl Into<String>) -> PyErr {
    to_py(py, invalid(message))
}

/// The `rill.errors.PanicError` of a panic caught at the boundary: a panic must not
/// cross into Python.
pub(crate) fn panic_to_py(py: Python<'_>, panic: &(dyn Any + Send)) -> PyErr {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    let message = format!("the Rill SDK panicked (a bug): {what}");
    let shape = Shape {
        class: Some("PanicError"),
        code: None,
        fields: Vec::new(),
    };
    build(py, shape, &message, false).unwrap_or_else(|_| PyRuntimeError::new_err(message))
}
