//! Typed requests and responses, and their mapping to frames.

use bytes::Bytes;
use prost::Message;

use crate::frame::{
    EncodedFrame, FLAG_ERROR, FLAG_MORE, FLAG_RESPONSE, Frame, PROTOCOL_VERSION, encode_frame,
};
use crate::pb::*;
use crate::{ErrorCode, ProtoError};

macro_rules! protocol {
    ($( $kind:literal => $name:ident($req:ident, $resp:ident) ),* $(,)?) => {
        /// Request kinds on the wire. Numbers are never reused.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        #[non_exhaustive]
        pub enum Kind {
            $(
                #[allow(missing_docs)]
                $name = $kind,
            )*
        }

        impl Kind {
            /// The kind with this number.
            pub fn from_u16(kind: u16) -> Option<Self> {
                match kind {
                    $( $kind => Some(Self::$name), )*
                    _ => None,
                }
            }

            /// Every kind.
            pub const ALL: &'static [Kind] = &[$(Self::$name),*];

            /// A short name for logs and metrics.
            pub fn name(self) -> &'static str {
                match self {
                    $( Self::$name => stringify!($name), )*
                }
            }
        }

        /// The control part of a request.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        pub enum RequestBody {
            $( $name($req), )*
        }

        /// The control part of a successful response.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        pub enum ResponseBody {
            $( $name($resp), )*
        }

        impl RequestBody {
            /// The request's kind.
            pub fn kind(&self) -> Kind {
                match self {
                    $( Self::$name(_) => Kind::$name, )*
                }
            }

            fn encode(&self, correlation_id: u64, payload: Bytes) -> Result<EncodedFrame, ProtoError> {
                match self {
                    $( Self::$name(m) => encode_frame($kind, 0, correlation_id, m, payload), )*
                }
            }

            fn decode(kind: Kind, control: Bytes) -> Result<Self, ProtoError> {
                Ok(match kind {
                    $( Kind::$name => Self::$name($req::decode(control)?), )*
                })
            }
        }

        impl ResponseBody {
            /// The kind of the request this answers.
            pub fn kind(&self) -> Kind {
                match self {
                    $( Self::$name(_) => Kind::$name, )*
                }
            }

            fn encode(&self, correlation_id: u64, payload: Bytes) -> Result<EncodedFrame, ProtoError> {
                match self {
                    $( Self::$name(m) => encode_frame($kind, FLAG_RESPONSE, correlation_id, m, payload), )*
                }
            }

            fn decode(kind: Kind, control: Bytes) -> Result<Self, ProtoError> {
                Ok(match kind {
                    $( Kind::$name => Self::$name($resp::decode(control)?), )*
                })
            }
        }
    };
}

protocol! {
    1 => Hello(HelloRequest, HelloResponse),
    2 => CreateStream(CreateStreamRequest, CreateStreamResponse),
    3 => DeleteStream(DeleteStreamRequest, DeleteStreamResponse),
    4 => ListStreams(ListStreamsRequest, ListStreamsResponse),
    5 => CreateTopic(CreateTopicRequest, CreateTopicResponse),
    6 => DeleteTopic(DeleteTopicRequest, DeleteTopicResponse),
    7 => ListTopics(ListTopicsRequest, ListTopicsResponse),
    8 => DescribeTopic(DescribeTopicRequest, DescribeTopicResponse),
    9 => InitProducer(InitProducerRequest, InitProducerResponse),
    10 => Produce(ProduceRequest, ProduceResponse),
    11 => Fetch(FetchRequest, FetchResponse),
    12 => ResolveOffset(ResolveOffsetRequest, ResolveOffsetResponse),
    13 => StoreOffset(StoreOffsetRequest, StoreOffsetResponse),
    14 => GetOffset(GetOffsetRequest, GetOffsetResponse),
    15 => DeleteOffset(DeleteOffsetRequest, DeleteOffsetResponse),
    16 => JoinGroup(JoinGroupRequest, JoinGroupResponse),
    17 => GroupHeartbeat(GroupHeartbeatRequest, GroupHeartbeatResponse),
    18 => LeaveGroup(LeaveGroupRequest, LeaveGroupResponse),
    19 => CommitGroupOffset(CommitGroupOffsetRequest, CommitGroupOffsetResponse),
    20 => DescribeGroup(DescribeGroupRequest, DescribeGroupResponse),
    21 => RepairPartition(RepairPartitionRequest, RepairPartitionResponse),
    22 => DeleteGroupOffset(DeleteGroupOffsetRequest, DeleteGroupOffsetResponse),
    23 => ClusterStatus(ClusterStatusRequest, ClusterStatusResponse),
    24 => Authenticate(AuthenticateRequest, AuthenticateResponse),
    25 => CreateUser(CreateUserRequest, CreateUserResponse),
    26 => DeleteUser(DeleteUserRequest, DeleteUserResponse),
    27 => ListUsers(ListUsersRequest, ListUsersResponse),
    28 => SetPassword(SetPasswordRequest, SetPasswordResponse),
    29 => GrantAcl(GrantAclRequest, GrantAclResponse),
    30 => RevokeAcl(RevokeAclRequest, RevokeAclResponse),
    31 => CreateToken(CreateTokenRequest, CreateTokenResponse),
    32 => ListTokens(ListTokensRequest, ListTokensResponse),
    33 => RevokeToken(RevokeTokenRequest, RevokeTokenResponse),
    34 => WhoAmI(WhoAmIRequest, WhoAmIResponse),
    35 => SetQuota(SetQuotaRequest, SetQuotaResponse),
    36 => ListGroups(ListGroupsRequest, ListGroupsResponse),
    37 => ListConsumers(ListConsumersRequest, ListConsumersResponse),
    38 => DeleteGroup(DeleteGroupRequest, DeleteGroupResponse),
    39 => ResetGroupOffsets(ResetGroupOffsetsRequest, ResetGroupOffsetsResponse),
    40 => ResetConsumerOffsets(ResetConsumerOffsetsRequest, ResetConsumerOffsetsResponse),
    41 => AlterTopic(AlterTopicRequest, AlterTopicResponse),
    42 => PurgeTopic(PurgeTopicRequest, PurgeTopicResponse),
    43 => Subscribe(SubscribeRequest, SubscribeResponse),
    44 => Credit(CreditRequest, CreditResponse),
    45 => Unsubscribe(UnsubscribeRequest, UnsubscribeResponse),
    46 => SplitRange(SplitRangeRequest, SplitRangeResponse),
    47 => MergeRanges(MergeRangesRequest, MergeRangesResponse),
}

/// A request: its control message and its payload (the batch of a `Produce`).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The control message.
    pub body: RequestBody,
    /// Raw bytes after the control part; empty for most kinds.
    pub payload: Bytes,
}

impl Request {
    /// A request without payload.
    pub fn new(body: RequestBody) -> Self {
        Self {
            body,
            payload: Bytes::new(),
        }
    }

    /// A request with a payload.
    pub fn with_payload(body: RequestBody, payload: Bytes) -> Self {
        Self { body, payload }
    }

    /// Encodes the request as a frame.
    pub fn encode(&self, correlation_id: u64) -> Result<EncodedFrame, ProtoError> {
        self.body.encode(correlation_id, self.payload.clone())
    }

    /// Decodes a request frame.
    pub fn decode(frame: Frame) -> Result<Self, ProtoError> {
        if frame.is_response() {
            return Err(ProtoError::MalformedFrame {
                correlation_id: frame.correlation_id,
                reason: "a response frame was sent as a request",
            });
        }
        if frame.has_more() {
            return Err(ProtoError::MalformedFrame {
                correlation_id: frame.correlation_id,
                reason: "the flag MORE is for pushed responses, not requests",
            });
        }
        check_version(&frame)?;
        let kind = Kind::from_u16(frame.kind).ok_or(ProtoError::UnknownKind {
            kind: frame.kind,
            correlation_id: frame.correlation_id,
        })?;
        let body =
            RequestBody::decode(kind, frame.control).map_err(|e| e.at(frame.correlation_id))?;
        Ok(Self {
            body,
            payload: frame.payload,
        })
    }
}

/// A response: a successful body (with the batches of a `Fetch` as payload) or an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// The request succeeded.
    Ok {
        /// The control message.
        body: ResponseBody,
        /// Raw bytes after the control part; batches for a `Fetch`.
        payload: Bytes,
    },
    /// The request failed.
    Err {
        /// Kind of the failed request.
        kind: u16,
        /// What went wrong.
        error: ErrorResponse,
    },
}

impl Response {
    /// A successful response without payload.
    pub fn ok(body: ResponseBody) -> Self {
        Self::Ok {
            body,
            payload: Bytes::new(),
        }
    }

    /// An error response to a request of `kind`.
    pub fn error(kind: u16, code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Err {
            kind,
            error: ErrorResponse {
                code: code as i32,
                message: message.into(),
                offset: None,
                range_start: None,
                leader: None,
                leader_address: None,
            },
        }
    }

    /// Encodes the response as a frame.
    pub fn encode(&self, correlation_id: u64) -> Result<EncodedFrame, ProtoError> {
        match self {
            Self::Ok { body, payload } => body.encode(correlation_id, payload.clone()),
            Self::Err { kind, error } => encode_frame(
                *kind,
                FLAG_RESPONSE | FLAG_ERROR,
                correlation_id,
                error,
                Bytes::new(),
            ),
        }
    }

    /// Encodes the response as a frame of a stream that goes on: the flag `MORE`
    /// (a subscription's pushes, docs/PROTOCOL.md §3.32).
    pub fn encode_more(&self, correlation_id: u64) -> Result<EncodedFrame, ProtoError> {
        let mut frame = self.encode(correlation_id)?;
        frame.head[7] |= FLAG_MORE;
        Ok(frame)
    }

    /// Decodes a response frame.
    pub fn decode(frame: Frame) -> Result<Self, ProtoError> {
        if !frame.is_response() {
            return Err(ProtoError::MalformedFrame {
                correlation_id: frame.correlation_id,
                reason: "a request frame was sent as a response",
            });
        }
        check_version(&frame)?;
        if frame.is_error() {
            let error = ErrorResponse::decode(frame.control)
                .map_err(|e| ProtoError::from(e).at(frame.correlation_id))?;
            return Ok(Self::Err {
                kind: frame.kind,
                error,
            });
        }
        let kind = Kind::from_u16(frame.kind).ok_or(ProtoError::UnknownKind {
            kind: frame.kind,
            correlation_id: frame.correlation_id,
        })?;
        let body =
            ResponseBody::decode(kind, frame.control).map_err(|e| e.at(frame.correlation_id))?;
        body.check_ranges(frame.correlation_id)?;
        Ok(Self::Ok {
            body,
            payload: frame.payload,
        })
    }
}

/// The largest producer epoch: record batches carry it as a `u16` (docs/FORMAT.md §1),
/// while `InitProducerResponse.producer_epoch` is a protobuf `uint32`.
const PRODUCER_EPOCH_MAX: u32 = u16::MAX as u32;

impl ResponseBody {
    /// Refuses values a field's protobuf type allows but the protocol does not.
    fn check_ranges(&self, correlation_id: u64) -> Result<(), ProtoError> {
        if let Self::InitProducer(r) = self
            && r.producer_epoch > PRODUCER_EPOCH_MAX
        {
            return Err(ProtoError::OutOfRange {
                correlation_id,
                field: "InitProducerResponse.producer_epoch",
                value: u64::from(r.producer_epoch),
                max: u64::from(PRODUCER_EPOCH_MAX),
            });
        }
        Ok(())
    }
}

fn check_version(frame: &Frame) -> Result<(), ProtoError> {
    if frame.version != PROTOCOL_VERSION {
        return Err(ProtoError::UnsupportedVersion {
            version: frame.version,
            correlation_id: frame.correlation_id,
        });
    }
    Ok(())
}
