//! The Avro codec: values as Avro binary datums of a schema the caller gives (no
//! container header; the schema is agreed out of band, e.g. in a registry).

use std::marker::PhantomData;
use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::writer::datum::GenericDatumWriter;
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ClientError, Position, Reader, Topic};

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

/// A topic whose values are Avro datums of one schema; see [`Topic::avro`].
#[derive(Debug)]
pub struct AvroTopic<T> {
    topic: Topic,
    schema: Arc<Schema>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for AvroTopic<T> {
    fn clone(&self) -> Self {
        Self {
            topic: self.topic.clone(),
            schema: Arc::clone(&self.schema),
            _type: PhantomData,
        }
    }
}

impl<T> AvroTopic<T> {
    pub(crate) fn new(topic: Topic, schema: Schema) -> Self {
        Self {
            topic,
            schema: Arc::new(schema),
            _type: PhantomData,
        }
    }

    /// The schema values are written with.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }
}

impl<T: Serialize> AvroTopic<T> {
    /// Publishes one value (balanced routing).
    pub async fn publish(&self, value: &T) -> Result<Position, ClientError> {
        self.topic.publish().avro(value, &self.schema).send().await
    }

    /// Publishes one value with a key.
    pub async fn publish_keyed(
        &self,
        key: impl Into<Bytes>,
        value: &T,
    ) -> Result<Position, ClientError> {
        self.topic
            .publish()
            .key(key)
            .avro(value, &self.schema)
            .send()
            .await
    }
}

impl<T: DeserializeOwned + Send + 'static> AvroTopic<T> {
    /// A cursor reader that decodes values with the schema.
    pub fn records(&self, name: &str) -> Reader<T> {
        let schema = Arc::clone(&self.schema);
        Reader::new(
            self.topic.clone(),
            name,
            Arc::new(move |b: Bytes| decode(&b, &schema)),
        )
    }
}
