//! The Avro codec: values as Avro binary datums of a schema the caller gives (no
//! container header; the schema is agreed out of band, e.g. in a registry).

use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::writer::datum::GenericDatumWriter;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ClientError, Codec};

/// Encodes `value` as an Avro datum of `schema`; fails if the value does not fit it.
pub fn encode<T: Serialize + ?Sized>(value: &T, schema: &Schema) -> Result<Vec<u8>, ClientError> {
    let value = apache_avro::to_value(value).map_err(|e| ClientError::Encode(e.to_string()))?;
    let value = value
        .resolve(schema)
        .map_err(|e| ClientError::Encode(format!("value does not fit the schema: {e}")))?;
    GenericDatumWriter::builder(schema)
        .build()
        .and_then(|w| w.write_value_to_vec(value))
        .map_err(|e| ClientError::Encode(e.to_string()))
}

/// Decodes an Avro datum of `schema` into a `T`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], schema: &Schema) -> Result<T, String> {
    let reader = GenericDatumReader::builder(schema)
        .build()
        .map_err(|e| e.to_string())?;
    let mut input = bytes;
    let value = reader.read_value(&mut input).map_err(|e| e.to_string())?;
    if !input.is_empty() {
        return Err(format!("{} bytes follow the Avro datum", input.len()));
    }
    apache_avro::from_value(&value).map_err(|e| e.to_string())
}

/// The Avro codec: values as binary datums of one schema (no container header). Cheap
/// to clone; see [`Topic::avro`](crate::Topic::avro).
#[derive(Debug, Clone)]
pub struct Avro {
    schema: Arc<Schema>,
}

impl Avro {
    /// A codec writing and reading datums of `schema`.
    pub fn new(schema: Schema) -> Self {
        Self {
            schema: Arc::new(schema),
        }
    }

    /// The schema values are written with.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }
}

impl Codec for Avro {
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, ClientError> {
        encode(value, &self.schema)
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, String> {
        decode(bytes, &self.schema)
    }
}
