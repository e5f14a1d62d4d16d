//! The API's errors and their JSON form, `{"error":{"code":"…","message":"…"}}`
//! (docs/HTTP_API.md §2.1).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rill_proto::ErrorCode;

/// Why a request of the HTTP port failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ApiError {
    /// A query or path parameter that does not parse, is out of its bounds, or is not
    /// one the endpoint takes.
    #[error("parameter {name}: {problem}")]
    BadParameter {
        /// The parameter.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A name that breaks the protocol's name rule.
    #[error("parameter {name}: the name {problem}")]
    InvalidName {
        /// The parameter.
        name: &'static str,
        /// What is wrong with it (`name_problem`'s words).
        problem: &'static str,
    },
    /// A body that is not the JSON the endpoint takes.
    #[error("the body is not the JSON expected: {0}")]
    BadJson(String),
    /// A body over the bound.
    #[error("the body is larger than {bytes_max} bytes")]
    PayloadTooLarge {
        /// The bound.
        bytes_max: usize,
    },
    /// No credential, or one the broker refused.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// A write while `--http-admin-writes` is off.
    #[error(
        "admin writes over HTTP are off: start rill serve with --http-admin-writes (TOML http_admin_writes = true, or RILL_HTTP_ADMIN_WRITES=true) to enable them"
    )]
    WritesDisabled,
    /// No route for the path.
    #[error("no such path: {0}")]
    NotFound(String),
    /// A route that does not take the method.
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    /// The request took longer than its bound.
    #[error("the request took longer than {seconds} s")]
    Timeout {
        /// The bound.
        seconds: u64,
    },
    /// The broker refused the request.
    #[error("{message}")]
    Broker {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
        /// For `DATA_LOSS`: the first offset of the damaged range.
        range_start: Option<u64>,
        /// For `DATA_LOSS`: where reading resumes; for the offset errors, the bound.
        offset: Option<u64>,
    },
    /// The broker answered with a body of another kind than the request's.
    #[error("the broker answered {got} to a {asked} request")]
    Unexpected {
        /// The kind asked.
        asked: &'static str,
        /// The kind answered.
        got: &'static str,
    },
    /// A task of the request failed (a panic in a blocking check).
    #[error("the request failed inside the server: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl ApiError {
    /// A parameter error.
    pub(crate) fn parameter(name: impl Into<String>, problem: impl Into<String>) -> Self {
        ApiError::BadParameter {
            name: name.into(),
            problem: problem.into(),
        }
    }

    /// An error answer of the broker.
    pub(crate) fn from_wire(error: &rill_proto::pb::ErrorResponse) -> Self {
        ApiError::Broker {
            code: ErrorCode::try_from(error.code).unwrap_or(ErrorCode::Internal),
            message: error.message.clone(),
            range_start: error.range_start,
            offset: error.offset,
        }
    }

    /// The code in the JSON body.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            ApiError::BadParameter { .. } => "BAD_PARAMETER",
            ApiError::InvalidName { .. } => "INVALID_NAME",
            ApiError::BadJson(_) => "BAD_JSON",
            ApiError::PayloadTooLarge { .. } => "PAYLOAD_TOO_LARGE",
            ApiError::Unauthenticated(_) => "UNAUTHENTICATED",
            ApiError::WritesDisabled => "WRITES_DISABLED",
            ApiError::NotFound(_) => "NOT_FOUND",
            ApiError::MethodNotAllowed(_) => "METHOD_NOT_ALLOWED",
            ApiError::Timeout { .. } => "TIMEOUT",
            ApiError::Broker { code, .. } => code.as_str_name(),
            ApiError::Unexpected { .. } | ApiError::Task(_) => "INTERNAL",
        }
    }

    /// The status of the answer.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::BadParameter { .. } | ApiError::InvalidName { .. } | ApiError::BadJson(_) => {
                StatusCode::BAD_REQUEST
            }
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::WritesDisabled => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Timeout { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Broker { code, .. } => broker_status(*code),
            ApiError::Unexpected { .. } | ApiError::Task(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The status of a broker error code (docs/HTTP_API.md §2.1).
fn broker_status(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::InvalidRequest
        | C::InvalidName
        | C::InvalidConfig
        | C::OffsetBeforeStart
        | C::OffsetBeyondEnd
        | C::TimestampOutOfRange => StatusCode::BAD_REQUEST,
        C::Unauthenticated => StatusCode::UNAUTHORIZED,
        C::PermissionDenied => StatusCode::FORBIDDEN,
        C::StreamNotFound
        | C::TopicNotFound
        | C::PartitionNotFound
        | C::GroupNotFound
        | C::OffsetNotFound => StatusCode::NOT_FOUND,
        C::StreamExists | C::TopicExists | C::GroupNotEmpty => StatusCode::CONFLICT,
        C::ShuttingDown
        | C::Busy
        | C::StorageFailure
        | C::Timeout
        | C::NotLeader
        | C::Rebalancing
        | C::Migrating => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::json!({
            "error": {"code": self.code(), "message": self.to_string()}
        });
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"rill\", charset=\"UTF-8\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_codes_map_to_statuses_and_names() {
        for (code, status) in [
            (ErrorCode::TopicNotFound, 404),
            (ErrorCode::TopicExists, 409),
            (ErrorCode::PermissionDenied, 403),
            (ErrorCode::Unauthenticated, 401),
            (ErrorCode::ShuttingDown, 503),
            (ErrorCode::InvalidName, 400),
            (ErrorCode::Internal, 500),
        ] {
            let e = ApiError::Broker {
                code,
                message: "m".into(),
                range_start: None,
                offset: None,
            };
            assert_eq!(e.status().as_u16(), status, "{code:?}");
            assert_eq!(e.code(), code.as_str_name());
        }
        assert_eq!(ApiError::WritesDisabled.status(), StatusCode::FORBIDDEN);
        assert!(
            ApiError::WritesDisabled
                .to_string()
                .contains("--http-admin-writes")
        );
        let unknown = rill_proto::pb::ErrorResponse {
            code: 9999,
            ..Default::default()
        };
        assert_eq!(ApiError::from_wire(&unknown).code(), "INTERNAL");
    }
}
