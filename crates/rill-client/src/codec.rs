//! Value codecs: JSON (default), MessagePack and (feature `avro`) Avro, via serde. A
//! codec is a value, so one can carry what it needs (Avro its schema).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ClientError;

/// Turns typed values into record bytes and back; see [`Topic::typed`](crate::Topic::typed)
/// for a topic viewed through one.
pub trait Codec: Send + Sync + 'static {
    /// Encodes a value; a value the codec cannot write is [`ClientError::Encode`].
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, ClientError>;
    /// Decodes a value; the error says why the bytes are not a `T` (readers return it
    /// as [`ClientError::Decode`] with the record's position).
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, String>;
}

/// JSON via `serde_json`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Codec for Json {
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, ClientError> {
        serde_json::to_vec(value).map_err(|e| ClientError::Encode(e.to_string()))
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// MessagePack via `rmp-serde` (structs as maps, so fields can be added).
#[derive(Debug, Clone, Copy, Default)]
pub struct MsgPack;

impl Codec for MsgPack {
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, ClientError> {
        rmp_serde::to_vec_named(value).map_err(|e| ClientError::Encode(e.to_string()))
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, String> {
        rmp_serde::from_slice(bytes).map_err(|e| e.to_string())
    }
}
