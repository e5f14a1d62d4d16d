//! The event model: keys with a stable byte encoding, event types with a tag, an
//! algebra, an ordering and a body codec (docs/EVENTS.md §1).

use serde::Serialize;
use serde::de::DeserializeOwned;
use xxhash_rust::xxh3::xxh3_64;

use crate::AlgebraKind;

/// How an event is ordered against other events of its key (docs/EVENTS.md §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Ordering {
    /// Ordered only against events of its own type.
    #[default]
    Relaxed,
    /// Nothing later of its key overtakes it.
    Acquire,
    /// Nothing earlier of its key is delayed past it.
    Release,
    /// Both.
    AcqRel,
}

impl Ordering {
    /// Every ordering, in wire order.
    pub const ALL: [Self; 4] = [Self::Relaxed, Self::Acquire, Self::Release, Self::AcqRel];

    /// The wire byte.
    pub fn to_byte(self) -> u8 {
        match self {
            Self::Relaxed => 0,
            Self::Acquire => 1,
            Self::Release => 2,
            Self::AcqRel => 3,
        }
    }

    /// The ordering of a wire byte, if it is one.
    pub fn from_byte(b: u8) -> Option<Self> {
        Self::ALL.get(usize::from(b)).copied()
    }

    /// Acquire or AcqRel: nothing later may overtake it.
    pub fn acquires(self) -> bool {
        matches!(self, Self::Acquire | Self::AcqRel)
    }

    /// Release or AcqRel: nothing earlier may be delayed past it.
    pub fn releases(self) -> bool {
        matches!(self, Self::Release | Self::AcqRel)
    }
}

/// How an event's body is encoded in the record's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BodyCodec {
    /// JSON (serde_json).
    #[default]
    Json,
    /// MessagePack (rmp-serde, structs as maps).
    MsgPack,
}

impl BodyCodec {
    /// The wire byte.
    pub fn to_byte(self) -> u8 {
        match self {
            Self::Json => 0,
            Self::MsgPack => 1,
        }
    }

    /// The codec of a wire byte, if it is one.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Json),
            1 => Some(Self::MsgPack),
            _ => None,
        }
    }

    /// Encodes a body.
    pub fn encode<T: Serialize + ?Sized>(self, body: &T) -> Result<Vec<u8>, BodyError> {
        match self {
            Self::Json => serde_json::to_vec(body).map_err(|e| BodyError(e.to_string())),
            Self::MsgPack => rmp_serde::to_vec_named(body).map_err(|e| BodyError(e.to_string())),
        }
    }

    /// Decodes a body.
    pub fn decode<T: DeserializeOwned>(self, bytes: &[u8]) -> Result<T, BodyError> {
        match self {
            Self::Json => serde_json::from_slice(bytes).map_err(|e| BodyError(e.to_string())),
            Self::MsgPack => rmp_serde::from_slice(bytes).map_err(|e| BodyError(e.to_string())),
        }
    }
}

/// A body that did not encode or decode, with the codec's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

/// A key's bytes that do not decode as the key type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The bytes end before the key does.
    #[error("the key's bytes end early: {needed} more needed")]
    Truncated {
        /// Bytes missing.
        needed: usize,
    },
    /// Bytes are left after the key.
    #[error("{0} bytes are left after the key")]
    Trailing(usize),
    /// A field's bytes are not a value of its type.
    #[error("a key field is invalid: {0}")]
    Invalid(&'static str),
}

/// The hash of a key's bytes: `xxh3_64`, the client's keyed-routing hash, so a key's
/// partition is `key_hash(bytes) % partitions` for the publisher and every consumer.
pub fn key_hash(key_bytes: &[u8]) -> u64 {
    xxh3_64(key_bytes)
}

/// The tag `#[derive(Event)]` gives a type named `name` (with `name = "..."`, or the
/// type's own name): the low 32 bits of `xxh3_64(name)`.
pub fn tag_for_name(name: &str) -> u32 {
    xxh3_64(name.as_bytes()) as u32
}

/// An event key: the topic its events live in and a stable byte encoding.
///
/// The encoding must never change for a key in use: it picks the partition, and it is
/// what a consumer groups events by. `#[derive(EventKey)]` writes one from the fields
/// (docs/EVENTS.md §1).
pub trait EventKey: Sized + Send + Sync + 'static {
    /// The topic every event keyed by this type is published to.
    const TOPIC: &'static str;

    /// Appends the key's bytes to `out` (never nothing: an empty key is refused).
    fn encode_into(&self, out: &mut Vec<u8>);

    /// Reads a key from exactly `bytes`.
    fn decode(bytes: &[u8]) -> Result<Self, KeyError>;

    /// The key's bytes.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }
}

/// An event type: its tag, key, algebra, ordering and body (docs/EVENTS.md §1).
/// `#[derive(Event)]` writes it for a struct that is its own body.
pub trait Event: Send + Sync + 'static {
    /// The key type; its topic is the event's topic.
    type Key: EventKey;
    /// What handlers receive (usually the event itself).
    type Body: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// How a run of this type may be reduced.
    type Algebra: AlgebraKind<Self::Body>;
    /// The type's tag: unique among the types of its topic, and stable.
    const TAG: u32;
    /// The ordering of events of this type unless [`Event::ordering`] says otherwise.
    const ORDERING: Ordering = Ordering::Relaxed;
    /// The body's codec.
    const CODEC: BodyCodec = BodyCodec::Json;

    /// The event's key.
    fn key(&self) -> Self::Key;

    /// The event's body.
    fn body(&self) -> &Self::Body;

    /// This event's ordering.
    fn ordering(&self) -> Ordering {
        Self::ORDERING
    }
}

/// A field of a derived key: how it is written and read (docs/EVENTS.md §1).
/// Integers are big-endian at their width, `bool` one byte, `String` and `Vec<u8>` a
/// u32 big-endian length and the bytes (no length as the last field of a key, where
/// the rest of the bytes are the field), `[u8; N]` as is.
pub trait KeyPart: Sized {
    /// Appends the field; `last` says it is the key's last field.
    fn put(&self, out: &mut Vec<u8>, last: bool);
    /// Reads the field from the front of `input`; `last` says it is the key's last
    /// field (it then takes the rest).
    fn take(input: &mut &[u8], last: bool) -> Result<Self, KeyError>;
}

fn take_bytes<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], KeyError> {
    if input.len() < n {
        return Err(KeyError::Truncated {
            needed: n - input.len(),
        });
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

macro_rules! int_part {
    ($($t:ty),*) => {$(
        impl KeyPart for $t {
            fn put(&self, out: &mut Vec<u8>, _last: bool) {
                out.extend_from_slice(&self.to_be_bytes());
            }
            fn take(input: &mut &[u8], _last: bool) -> Result<Self, KeyError> {
                let bytes = take_bytes(input, std::mem::size_of::<$t>())?;
                Ok(<$t>::from_be_bytes(bytes.try_into().expect("the width was taken")))
            }
        }
    )*};
}
int_part!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

impl KeyPart for bool {
    fn put(&self, out: &mut Vec<u8>, _last: bool) {
        out.push(u8::from(*self));
    }
    fn take(input: &mut &[u8], _last: bool) -> Result<Self, KeyError> {
        match take_bytes(input, 1)? {
            [0] => Ok(false),
            [1] => Ok(true),
            _ => Err(KeyError::Invalid("a bool is 0 or 1")),
        }
    }
}

fn put_var(bytes: &[u8], out: &mut Vec<u8>, last: bool) {
    if !last {
        let len = u32::try_from(bytes.len()).expect("a key field is under 4 GiB");
        out.extend_from_slice(&len.to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

fn take_var<'a>(input: &mut &'a [u8], last: bool) -> Result<&'a [u8], KeyError> {
    if last {
        return take_bytes(input, input.len());
    }
    let len = u32::take(input, false)?;
    take_bytes(input, len as usize)
}

impl KeyPart for Vec<u8> {
    fn put(&self, out: &mut Vec<u8>, last: bool) {
        put_var(self, out, last);
    }
    fn take(input: &mut &[u8], last: bool) -> Result<Self, KeyError> {
        take_var(input, last).map(<[u8]>::to_vec)
    }
}

impl KeyPart for String {
    fn put(&self, out: &mut Vec<u8>, last: bool) {
        put_var(self.as_bytes(), out, last);
    }
    fn take(input: &mut &[u8], last: bool) -> Result<Self, KeyError> {
        let bytes = take_var(input, last)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| KeyError::Invalid("a string is UTF-8"))
    }
}

impl<const N: usize> KeyPart for [u8; N] {
    fn put(&self, out: &mut Vec<u8>, _last: bool) {
        out.extend_from_slice(self);
    }
    fn take(input: &mut &[u8], _last: bool) -> Result<Self, KeyError> {
        Ok(take_bytes(input, N)?
            .try_into()
            .expect("N bytes were taken"))
    }
}

/// Reads a whole derived key: the fields in order, then no bytes left.
#[doc(hidden)]
pub fn finish_key(input: &[u8]) -> Result<(), KeyError> {
    if input.is_empty() {
        Ok(())
    } else {
        Err(KeyError::Trailing(input.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orderings_and_codecs_round_trip_their_bytes() {
        for o in Ordering::ALL {
            assert_eq!(Ordering::from_byte(o.to_byte()), Some(o));
        }
        assert_eq!(Ordering::from_byte(4), None);
        for c in [BodyCodec::Json, BodyCodec::MsgPack] {
            assert_eq!(BodyCodec::from_byte(c.to_byte()), Some(c));
        }
        assert_eq!(BodyCodec::from_byte(2), None);
    }

    #[test]
    fn key_parts_are_big_endian_and_length_prefixed_unless_last() {
        let mut out = Vec::new();
        17u64.put(&mut out, false);
        "ab".to_owned().put(&mut out, false);
        "cd".to_owned().put(&mut out, true);
        assert_eq!(
            out,
            [0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 2, b'a', b'b', b'c', b'd']
        );
        let mut input = &out[..];
        assert_eq!(u64::take(&mut input, false), Ok(17));
        assert_eq!(String::take(&mut input, false).as_deref(), Ok("ab"));
        assert_eq!(String::take(&mut input, true).as_deref(), Ok("cd"));
        assert_eq!(finish_key(input), Ok(()));
        let mut short = &[0u8, 0, 0, 9, 1][..];
        assert_eq!(
            String::take(&mut short, false),
            Err(KeyError::Truncated { needed: 8 })
        );
        assert_eq!(
            bool::take(&mut &[2u8][..], false),
            Err(KeyError::Invalid("a bool is 0 or 1"))
        );
    }

    #[test]
    fn the_key_hash_is_the_clients_routing_hash() {
        for key in [&b"order-17"[..], b"k0", b"a"] {
            assert_eq!(
                (key_hash(key) % 12) as u32,
                rill_client::partition_for_key(key, 12)
            );
        }
    }
}
