//! Conversions between Python values and the Rust SDK's: bytes, typed headers, records,
//! positions, topic options and descriptions, and the JSON and MessagePack codecs.

use std::cell::RefCell;
use std::time::Duration;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};
use rill_client::{
    ClientError, Codec, Json, Message, MsgPack, Position, Record, TopicConfig, TopicDescription,
    Value,
};

use crate::error::{invalid, invalid_py, to_py};

/// Values at least this long are shared with Python, not copied: below it, a copy is
/// cheaper than a reference released later.
const SHARE_BYTES_MIN: usize = 512;

/// Bytes of a value or key given from Python: `bytes`, `bytearray` or `str` (UTF-8).
pub(crate) fn bytes_of(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        let data = b.as_bytes();
        if data.len() < SHARE_BYTES_MIN {
            return Ok(Bytes::copy_from_slice(data));
        }
        // `bytes` are immutable: share them instead of copying. The reference is
        // released without the GIL wherever the SDK drops the message (PyO3 defers it).
        return Ok(Bytes::from_owner(PyBackedBytes::from(b.clone())));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Bytes::from(b.to_vec()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Bytes::from(s.to_cow()?.into_owned()));
    }
    Err(invalid_py(
        obj.py(),
        format!(
            "{what} must be bytes, bytearray or str, not {}",
            type_name(obj)
        ),
    ))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .qualname()
        .map_or_else(|_| "an unknown type".to_owned(), |n| n.to_string())
}

/// The header type names, as `(type_name, value)` tuples and `rill.HeaderValue` name
/// them; each is one variant of the SDK's `Value`.
pub(crate) const HEADER_TYPES: [&str; 15] = [
    "str", "bytes", "bool", "int8", "int16", "int32", "int64", "int128", "uint8", "uint16",
    "uint32", "uint64", "uint128", "float32", "float64",
];

/// A typed header value from `(type_name, value)`.
fn typed_header(name: &str, ty: &str, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let py = v.py();
    let wrong = |expected: &str| {
        invalid_py(
            py,
            format!(
                "header {name:?}: a {ty} value must be {expected}, not {}",
                describe(v)
            ),
        )
    };
    // Integers are checked for their type first: `True` is an int to Python, and
    // `1.5` would otherwise fail with a less helpful message.
    let int = |v: &Bound<'_, PyAny>| v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>();
    macro_rules! integer {
        ($t:ty, $variant:ident, $range:expr) => {{
            if !int(v) {
                return Err(wrong("an int"));
            }
            v.extract::<$t>()
                .map(Value::$variant)
                .map_err(|_| wrong(concat!("an int in ", $range)))
        }};
    }
    match ty {
        "str" => v
            .cast::<PyString>()
            .map_err(|_| wrong("a str"))
            .and_then(|s| Ok(Value::Str(s.to_cow()?.into_owned()))),
        "bytes" => {
            if v.is_instance_of::<PyBytes>() || v.is_instance_of::<PyByteArray>() {
                bytes_of("a header", v).map(Value::Bytes)
            } else {
                Err(wrong("bytes"))
            }
        }
        "bool" => v
            .cast::<PyBool>()
            .map(|b| Value::Bool(b.is_true()))
            .map_err(|_| wrong("a bool")),
        "int8" => integer!(i8, I8, "-128..=127"),
        "int16" => integer!(i16, I16, "-32768..=32767"),
        "int32" => integer!(i32, I32, "the int32 range"),
        "int64" => integer!(i64, I64, "the int64 range"),
        "int128" => integer!(i128, I128, "the int128 range"),
        "uint8" => integer!(u8, U8, "0..=255"),
        "uint16" => integer!(u16, U16, "0..=65535"),
        "uint32" => integer!(u32, U32, "the uint32 range"),
        "uint64" => integer!(u64, U64, "the uint64 range"),
        "uint128" => integer!(u128, U128, "the uint128 range"),
        "float32" | "float64" => {
            let number = v.is_instance_of::<PyFloat>() || int(v);
            if !number {
                return Err(wrong("a float"));
            }
            let x: f64 = v.extract().map_err(|_| wrong("a float"))?;
            if ty == "float64" {
                return Ok(Value::F64(x));
            }
            // An f32 header holds the nearest f32; a finite value beyond its range is
            // refused rather than stored as infinity.
            let narrowed = x as f32;
            if x.is_finite() && !narrowed.is_finite() {
                return Err(wrong("a float in the float32 range"));
            }
            Ok(Value::F32(narrowed))
        }
        other => Err(invalid_py(
            py,
            format!(
                "header {name:?}: unknown header type {other:?}; expected one of {}",
                HEADER_TYPES.join(", ")
            ),
        )),
    }
}

fn describe(v: &Bound<'_, PyAny>) -> String {
    let repr = v.repr().map_or_else(|_| "?".to_owned(), |r| r.to_string());
    let repr: String = repr.chars().take(64).collect();
    format!("{repr} ({})", type_name(v))
}

/// A header value: a `(type_name, value)` pair (a `rill.HeaderValue` is one), or a
/// plain `str`, `bytes`, `bool` or `float` (an `int` must say its type).
fn header_value(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let py = v.py();
    if let Ok(t) = v.cast::<PyTuple>() {
        if t.len() != 2 {
            return Err(invalid_py(
                py,
                format!("header {name:?}: a typed value is a (type_name, value) pair"),
            ));
        }
        let ty = t.get_item(0)?;
        let ty = ty.cast::<PyString>().map_err(|_| {
            invalid_py(
                py,
                format!(
                    "header {name:?}: the type name must be a str, not {}",
                    describe(&ty)
                ),
            )
        })?;
        return typed_header(name, &ty.to_cow()?, &t.get_item(1)?);
    }
    if v.is_instance_of::<PyBool>() {
        return typed_header(name, "bool", v);
    }
    if v.is_instance_of::<PyString>() {
        return typed_header(name, "str", v);
    }
    if v.is_instance_of::<PyBytes>() || v.is_instance_of::<PyByteArray>() {
        return typed_header(name, "bytes", v);
    }
    if v.is_instance_of::<PyFloat>() {
        return typed_header(name, "float64", v);
    }
    if v.is_instance_of::<PyInt>() {
        return Err(invalid_py(
            py,
            format!(
                "header {name:?}: an int header needs its type, as (\"int64\", {}) or rill.HeaderValue.int64(...)",
                describe(v)
            ),
        ));
    }
    Err(invalid_py(
        py,
        format!(
            "header {name:?}: {} is not a header value; use (type_name, value)",
            describe(v)
        ),
    ))
}

/// Headers from a `dict` of name to value, or a sequence of `(name, value)` pairs
/// (which may name a header twice), in order.
pub(crate) fn headers_of(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, Value)>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(Vec::new());
    };
    let py = obj.py();
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = if let Ok(d) = obj.cast::<PyDict>() {
        d.iter().collect()
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut pairs = Vec::new();
        for item in obj.try_iter()? {
            let item = item?;
            let pair = item
                .cast::<PyTuple>()
                .ok()
                .filter(|t| t.len() == 2)
                .ok_or_else(|| invalid_py(py, "headers as a sequence are (name, value) pairs"))?;
            pairs.push((pair.get_item(0)?, pair.get_item(1)?));
        }
        pairs
    } else {
        return Err(invalid_py(
            py,
            format!(
                "headers must be a dict or a list of (name, value) pairs, not {}",
                type_name(obj)
            ),
        ));
    };
    pairs
        .into_iter()
        .map(|(name, value)| {
            let name = name
                .cast::<PyString>()
                .map_err(|_| {
                    invalid_py(
                        py,
                        format!("a header name must be a str, not {}", describe(&name)),
                    )
                })?
                .to_cow()?
                .into_owned();
            let value = header_value(&name, &value)?;
            Ok((name, value))
        })
        .collect()
}

/// A message from its parts as Python gives them.
pub(crate) fn message_of(
    value: &Bound<'_, PyAny>,
    key: Option<&Bound<'_, PyAny>>,
    headers: Option<&Bound<'_, PyAny>>,
) -> PyResult<Message> {
    let mut message = Message::new(bytes_of("a value", value)?);
    if let Some(key) = key.filter(|k| !k.is_none()) {
        message.key = Some(bytes_of("a key", key)?);
    }
    message.headers = headers_of(headers)?;
    Ok(message)
}

/// Messages from a sequence of `(value, key, headers)` triples or bare values
/// (`bytes`, `bytearray`, `str`).
pub(crate) fn messages_of(items: &Bound<'_, PyAny>) -> PyResult<Vec<Message>> {
    let py = items.py();
    let mut messages = Vec::with_capacity(items.len().unwrap_or(0));
    for item in items.try_iter()? {
        let item = item?;
        if !item.is_instance_of::<PyTuple>() {
            messages.push(Message::new(bytes_of("a message value", &item)?));
            continue;
        }
        let triple = item
            .cast::<PyTuple>()
            .ok()
            .filter(|t| t.len() == 3)
            .ok_or_else(|| invalid_py(py, "a message is a (value, key, headers) triple"))?;
        let key = triple.get_item(1)?;
        let headers = triple.get_item(2)?;
        messages.push(message_of(
            &triple.get_item(0)?,
            Some(&key),
            Some(&headers),
        )?);
    }
    Ok(messages)
}

/// A header value as `(type_name, value)`.
fn header_out<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    macro_rules! pair {
        ($name:expr, $v:expr) => {
            ($name, $v).into_pyobject(py)?.into_any()
        };
    }
    Ok(match value {
        Value::Str(v) => pair!("str", v.as_str()),
        Value::Bytes(v) => pair!("bytes", PyBytes::new(py, v)),
        Value::Bool(v) => pair!("bool", *v),
        Value::I8(v) => pair!("int8", *v),
        Value::I16(v) => pair!("int16", *v),
        Value::I32(v) => pair!("int32", *v),
        Value::I64(v) => pair!("int64", *v),
        Value::I128(v) => pair!("int128", *v),
        Value::U8(v) => pair!("uint8", *v),
        Value::U16(v) => pair!("uint16", *v),
        Value::U32(v) => pair!("uint32", *v),
        Value::U64(v) => pair!("uint64", *v),
        Value::U128(v) => pair!("uint128", *v),
        Value::F32(v) => pair!("float32", f64::from(*v)),
        Value::F64(v) => pair!("float64", *v),
    })
}

/// A record on its way to Python: a tuple `(partition, offset, timestamp_us, key,
/// headers, value)`, headers as `[(name, (type_name, value))]`.
#[derive(Debug)]
pub(crate) struct PyRecord(pub(crate) Record);

impl<'py> IntoPyObject<'py> for PyRecord {
    type Target = PyTuple;
    type Output = Bound<'py, PyTuple>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let r = self.0;
        let headers = PyList::empty(py);
        for (name, value) in &r.headers {
            headers.append((name.as_str(), header_out(py, value)?))?;
        }
        let key = r.key.as_ref().map(|k| PyBytes::new(py, k));
        (
            r.partition,
            r.offset,
            r.timestamp_us,
            key,
            headers,
            PyBytes::new(py, &r.value),
        )
            .into_pyobject(py)
    }
}

/// A position on its way to Python: `(partition, offset)`.
/// The positions of a batch, packed as two `bytes` of native-endian `u32` partitions
/// and `u64` offsets (`rill.Positions` reads them without a tuple per record).
#[derive(Debug)]
pub(crate) struct PackedPositions(Vec<Position>);

impl PackedPositions {
    pub(crate) fn new(positions: Vec<Position>) -> Self {
        Self(positions)
    }
}

impl<'py> IntoPyObject<'py> for PackedPositions {
    type Target = PyTuple;
    type Output = Bound<'py, PyTuple>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let partitions: Vec<u8> = self
            .0
            .iter()
            .flat_map(|p| p.partition.to_ne_bytes())
            .collect();
        let offsets: Vec<u8> = self.0.iter().flat_map(|p| p.offset.to_ne_bytes()).collect();
        (PyBytes::new(py, &partitions), PyBytes::new(py, &offsets)).into_pyobject(py)
    }
}

pub(crate) fn position_out(p: Position) -> (u32, u64) {
    (p.partition, p.offset)
}

/// A topic's options as a dict.
#[derive(Debug)]
pub(crate) struct PyTopicConfig(pub(crate) TopicConfig);

impl<'py> IntoPyObject<'py> for PyTopicConfig {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let c = self.0;
        let d = PyDict::new(py);
        d.set_item("partitions", c.partitions)?;
        d.set_item("retention_ms", c.retention.map(millis))?;
        d.set_item("retention_bytes", c.retention_bytes)?;
        d.set_item("segment_bytes", c.segment_bytes)?;
        d.set_item("durability", c.durability.to_string())?;
        d.set_item("max_record_bytes", c.max_record_bytes)?;
        d.set_item("elastic", c.elastic)?;
        match c.auto_split {
            Some(a) => {
                let ad = PyDict::new(py);
                ad.set_item("bytes_per_s", a.bytes_per_s)?;
                ad.set_item("window_ms", a.window.map(millis))?;
                ad.set_item("cooldown_ms", a.cooldown.map(millis))?;
                d.set_item("auto_split", ad)?;
            }
            None => d.set_item("auto_split", py.None())?,
        }
        Ok(d)
    }
}

/// What a split or merge of an elastic topic's ranges did, as a dict.
#[derive(Debug)]
pub(crate) struct PyRangeChange(pub(crate) rill_client::RangeChange);

impl<'py> IntoPyObject<'py> for PyRangeChange {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let c = self.0;
        let d = PyDict::new(py);
        d.set_item("sealed", c.sealed)?;
        d.set_item("opened", c.opened)?;
        d.set_item("range_epoch", c.epoch)?;
        Ok(d)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A topic's description as a dict.
#[derive(Debug)]
pub(crate) struct PyTopicDescription(pub(crate) TopicDescription);

impl<'py> IntoPyObject<'py> for PyTopicDescription {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let t = self.0;
        let d = PyDict::new(py);
        d.set_item("stream", t.stream)?;
        d.set_item("name", t.name)?;
        d.set_item("config", PyTopicConfig(t.config))?;
        let partitions = PyList::empty(py);
        for p in t.partitions {
            let pd = PyDict::new(py);
            pd.set_item("partition", p.partition)?;
            pd.set_item("first_offset", p.first_offset)?;
            pd.set_item("next_offset", p.next_offset)?;
            pd.set_item("size_bytes", p.size_bytes)?;
            pd.set_item("segments", p.segments)?;
            pd.set_item("failure", p.failure)?;
            let damaged = PyList::empty(py);
            for r in p.damaged {
                let rd = PyDict::new(py);
                rd.set_item("from_offset", r.from)?;
                rd.set_item("to_offset", r.to)?;
                rd.set_item("segment", r.segment)?;
                rd.set_item("position", r.position)?;
                rd.set_item("reason", r.reason)?;
                rd.set_item("accepted", r.accepted)?;
                damaged.append(rd)?;
            }
            pd.set_item("damaged", damaged)?;
            partitions.append(pd)?;
        }
        d.set_item("partitions", partitions)?;
        let ranges = PyList::empty(py);
        for r in t.ranges {
            let rd = PyDict::new(py);
            rd.set_item("id", r.id)?;
            rd.set_item("lo", r.lo)?;
            rd.set_item("hi", r.hi)?;
            rd.set_item("parents", r.parents)?;
            rd.set_item("sealed_at", r.sealed_at)?;
            rd.set_item("bytes_per_s", r.bytes_per_s)?;
            ranges.append(rd)?;
        }
        d.set_item("ranges", ranges)?;
        d.set_item("range_epoch", t.range_epoch)?;
        Ok(d)
    }
}

// ---- codecs --------------------------------------------------------------------------

/// A Python value serialized as it is (`dict`, `list`, `str`, numbers, `bool`, `None`,
/// `bytes`, dataclasses), for the SDK's codecs.
struct PyValue<'a, 'py>(RefCell<Option<pythonize::Depythonizer<'a, 'py>>>);

impl serde::Serialize for PyValue<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut de = self
            .0
            .borrow_mut()
            .take()
            .ok_or_else(|| serde::ser::Error::custom("a value is serialized once"))?;
        serde_transcode::transcode(&mut de, serializer)
    }
}

fn encode_with<C: Codec>(codec: &C, obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let value = PyValue(RefCell::new(Some(pythonize::Depythonizer::from_object(
        obj,
    ))));
    codec.encode(&value).map_err(|e| to_py(obj.py(), e))
}

fn decode_error(py: Python<'_>, reason: String) -> PyErr {
    // The position is the caller's to add (it knows the record).
    to_py(
        py,
        ClientError::Decode {
            partition: 0,
            offset: 0,
            reason,
        },
    )
}

/// Encodes a value as JSON with the Rust SDK's codec (`rill_client::Json`).
#[pyfunction]
pub(crate) fn encode_json<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(obj.py(), &encode_with(&Json, obj)?))
}

/// Encodes a value as MessagePack with the Rust SDK's codec (`rill_client::MsgPack`:
/// maps with named fields).
#[pyfunction]
pub(crate) fn encode_msgpack<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(obj.py(), &encode_with(&MsgPack, obj)?))
}

/// Decodes a JSON value (the whole input: trailing bytes are an error).
#[pyfunction]
pub(crate) fn decode_json<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let mut de = serde_json::Deserializer::from_slice(data);
    let value = serde_transcode::transcode(&mut de, pythonize::Pythonizer::new(py))
        .map_err(|e| decode_error(py, e.to_string()))?;
    de.end().map_err(|e| decode_error(py, e.to_string()))?;
    Ok(value)
}

/// Decodes a MessagePack value (the whole input: trailing bytes are an error).
#[pyfunction]
pub(crate) fn decode_msgpack<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let mut cursor = std::io::Cursor::new(data);
    let mut de = rmp_serde::Deserializer::new(&mut cursor);
    let value = serde_transcode::transcode(&mut de, pythonize::Pythonizer::new(py))
        .map_err(|e| decode_error(py, e.to_string()))?;
    let rest = data.len() as u64 - cursor.position();
    if rest > 0 {
        return Err(decode_error(
            py,
            format!("{rest} bytes after the MessagePack value"),
        ));
    }
    Ok(value)
}

/// A positive duration of `ms` milliseconds, or an error naming `what`.
pub(crate) fn positive_ms(what: &str, ms: u64) -> Result<Duration, ClientError> {
    if ms == 0 {
        return Err(invalid(format!("{what} must be positive")));
    }
    Ok(Duration::from_millis(ms))
}

// ---- keyword options -----------------------------------------------------------------

/// Keyword options given to a builder (`topic.producer(**options)`): each is taken by
/// name and type, and a name left over is an error, so a misspelt option is never
/// silently ignored.
pub(crate) struct Kwargs<'py> {
    py: Python<'py>,
    what: &'static str,
    options: Option<Bound<'py, PyDict>>,
}

impl<'py> Kwargs<'py> {
    /// The options of `what` (for messages).
    pub(crate) fn new(
        py: Python<'py>,
        what: &'static str,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Self> {
        let options = options.map(|o| o.copy()).transpose()?;
        Ok(Self { py, what, options })
    }

    /// The option `name`, if given and not `None`.
    pub(crate) fn take<T>(&mut self, name: &str) -> PyResult<Option<T>>
    where
        T: for<'a> FromPyObject<'a, 'py>,
    {
        let Some(options) = &self.options else {
            return Ok(None);
        };
        let Some(value) = options.get_item(name)? else {
            return Ok(None);
        };
        options.del_item(name)?;
        if value.is_none() {
            return Ok(None);
        }
        // A bool is an int to Python; no option takes a bool where it wants a number.
        if value.is_instance_of::<PyBool>() && std::any::type_name::<T>() != "bool" {
            return Err(self.wrong(name, &value));
        }
        value
            .extract::<T>()
            .map(Some)
            .map_err(|_| self.wrong(name, &value))
    }

    fn wrong(&self, name: &str, value: &Bound<'py, PyAny>) -> PyErr {
        invalid_py(
            self.py,
            format!(
                "{} option {name}: {} is not valid here",
                self.what,
                describe(value)
            ),
        )
    }

    /// Fails if an option was given that no `take` asked for.
    pub(crate) fn finish(self) -> PyResult<()> {
        let Some(options) = self.options else {
            return Ok(());
        };
        let left: Vec<String> = options.keys().iter().map(|k| k.to_string()).collect();
        if left.is_empty() {
            return Ok(());
        }
        Err(invalid_py(
            self.py,
            format!("unknown {} option(s): {}", self.what, left.join(", ")),
        ))
    }
}
