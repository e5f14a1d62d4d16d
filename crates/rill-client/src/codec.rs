//! Value codecs: JSON (default) and MessagePack, via serde.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ClientError;

/// Turns typed values into record bytes and back.
pub trait Codec: Send + Sync + 'static {
    /// Encodes a value.
    fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, ClientError>;
    /// Decodes a value.
    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String>;
}

/// JSON via `serde_json`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Codec for Json {
    fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, ClientError> {
        serde_json::to_vec(value).map_err(|e| ClientError::Encode(e.to_string()))
    }

    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// MessagePack via `rmp-serde` (structs as maps, so fields can be added).
#[derive(Debug, Clone, Copy, Default)]
pub struct MsgPack;

impl Codec for MsgPack {
    fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, ClientError> {
        rmp_serde::to_vec_named(value).map_err(|e| ClientError::Encode(e.to_string()))
    }

    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
        rmp_serde::from_slice(bytes).map_err(|e| e.to_string())
    }
}
