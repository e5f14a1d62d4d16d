//! Users, ACLs and tokens of a server started with `--auth` (docs/SECURITY.md,
//! docs/PROTOCOL.md §3.24). A password is derived into its verifiers here, so it never
//! leaves the process.

use std::time::Duration;

use bytes::Bytes;
use rill_auth::Secret;
use rill_auth::password::{PasswordVerifiers, SCRAM_ITERATIONS_DEFAULT};
pub use rill_auth::store::{Permission, QUOTA_RATE_MIN, Quota, Role};
use rill_proto::pb;
use rill_proto::{RequestBody, ResponseBody};

use crate::client::{Retry, unexpected};
use crate::{Client, ClientError};

/// A user as `list_users` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// The name.
    pub name: String,
    /// The role.
    pub role: Role,
    /// When it was made, in ms since the Unix epoch.
    pub created_ms: u64,
    /// Per stream, what the user may do there.
    pub acls: Vec<(String, Vec<Permission>)>,
    /// The user's byte rates on each node (unlimited where `None`).
    pub quota: Quota,
}

/// A change to a user's quota for [`Client::set_quota`]: the rates it names are set,
/// the others kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaChange {
    /// On the wire: absent keeps the rate, 0 removes it.
    produce: Option<u64>,
    fetch: Option<u64>,
}

impl QuotaChange {
    /// Changes nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the produce rate in bytes per second; `None` removes the limit.
    pub fn produce(mut self, bytes_per_second: Option<u64>) -> Self {
        self.produce = Some(bytes_per_second.unwrap_or(0));
        self
    }

    /// Sets the fetch rate in bytes per second; `None` removes the limit.
    pub fn fetch(mut self, bytes_per_second: Option<u64>) -> Self {
        self.fetch = Some(bytes_per_second.unwrap_or(0));
        self
    }
}

fn quota_from_wire(q: Option<pb::Quota>) -> Quota {
    let q = q.unwrap_or_default();
    let rate = |r: u64| (r != 0).then_some(r);
    Quota {
        produce_bytes_per_second: rate(q.produce_bytes_per_second),
        fetch_bytes_per_second: rate(q.fetch_bytes_per_second),
    }
}

/// A token as `list_tokens` reports it (never its string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// The token's name.
    pub name: String,
    /// The user it acts for.
    pub user: String,
    /// When it was made, in ms since the Unix epoch.
    pub created_ms: u64,
    /// When it stops working, if ever.
    pub expires_ms: Option<u64>,
}

/// A new token: its string, shown once, and its expiry.
#[derive(Debug, Clone)]
pub struct NewToken {
    /// The token string; the server keeps only its hash.
    pub token: Secret,
    /// When it stops working, in ms since the Unix epoch, if ever.
    pub expires_ms: Option<u64>,
}

/// Who the client is to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhoAmI {
    /// The user, or `None` for the data directory's owner and on a server without
    /// `--auth`.
    pub user: Option<String>,
    /// The user's role.
    pub role: Option<Role>,
    /// The token the connection authenticated with, if any.
    pub token: Option<String>,
    /// Whether the server requires authentication.
    pub auth_required: bool,
}

fn role_to_wire(role: Role) -> i32 {
    match role {
        Role::Admin => pb::Role::Admin as i32,
        Role::User => pb::Role::User as i32,
    }
}

fn role_from_wire(role: i32) -> Option<Role> {
    match pb::Role::try_from(role) {
        Ok(pb::Role::Admin) => Some(Role::Admin),
        Ok(pb::Role::User) => Some(Role::User),
        _ => None,
    }
}

fn permission_to_wire(p: Permission) -> i32 {
    match p {
        Permission::Read => pb::Permission::Read as i32,
        Permission::Write => pb::Permission::Write as i32,
        Permission::Manage => pb::Permission::Manage as i32,
    }
}

fn permission_from_wire(p: i32) -> Option<Permission> {
    match pb::Permission::try_from(p) {
        Ok(pb::Permission::Read) => Some(Permission::Read),
        Ok(pb::Permission::Write) => Some(Permission::Write),
        Ok(pb::Permission::Manage) => Some(Permission::Manage),
        _ => None,
    }
}

/// Derives what a password is sent as.
fn verifiers(password: &Secret) -> Result<pb::PasswordVerifiers, ClientError> {
    let v = PasswordVerifiers::derive(password, SCRAM_ITERATIONS_DEFAULT)
        .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
    Ok(pb::PasswordVerifiers {
        argon2id: v.argon2id,
        scram_salt: v.scram.salt,
        scram_iterations: v.scram.iterations,
        scram_stored_key: v.scram.stored_key.to_vec(),
        scram_server_key: v.scram.server_key.to_vec(),
    })
}

impl Client {
    async fn auth_call(&self, body: RequestBody) -> Result<ResponseBody, ClientError> {
        Ok(self.call(body, Bytes::new(), Retry::Safe).await?.0)
    }

    /// Adds a user (an admin's request; the data directory's owner may too). The
    /// password is checked (8 to 1024 bytes) and derived here; only its verifiers are
    /// sent.
    pub async fn create_user(
        &self,
        name: &str,
        role: Role,
        password: &Secret,
    ) -> Result<(), ClientError> {
        let body = RequestBody::CreateUser(pb::CreateUserRequest {
            name: name.to_owned(),
            role: role_to_wire(role),
            password: Some(verifiers(password)?),
            quota: None,
        });
        match self.auth_call(body).await? {
            ResponseBody::CreateUser(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Removes a user with its tokens and ACLs; returns whether it existed.
    pub async fn delete_user(&self, name: &str) -> Result<bool, ClientError> {
        let body = RequestBody::DeleteUser(pb::DeleteUserRequest {
            name: name.to_owned(),
        });
        match self.auth_call(body).await? {
            ResponseBody::DeleteUser(r) => Ok(r.deleted),
            other => Err(unexpected(&other)),
        }
    }

    /// Every user with its role and ACLs (an admin's request).
    pub async fn list_users(&self) -> Result<Vec<UserInfo>, ClientError> {
        match self
            .auth_call(RequestBody::ListUsers(pb::ListUsersRequest {}))
            .await?
        {
            ResponseBody::ListUsers(r) => Ok(r
                .users
                .into_iter()
                .map(|u| UserInfo {
                    name: u.name,
                    role: role_from_wire(u.role).unwrap_or(Role::User),
                    created_ms: u.created_ms,
                    quota: quota_from_wire(u.quota),
                    acls: u
                        .acls
                        .into_iter()
                        .map(|a| {
                            (
                                a.stream,
                                a.permissions
                                    .into_iter()
                                    .filter_map(permission_from_wire)
                                    .collect(),
                            )
                        })
                        .collect(),
                })
                .collect()),
            other => Err(unexpected(&other)),
        }
    }

    /// Changes a user's byte rates (an admin's request; docs/SECURITY.md §7) and
    /// returns the quota now in force. A rate is at least 1024 bytes/s.
    pub async fn set_quota(&self, user: &str, change: QuotaChange) -> Result<Quota, ClientError> {
        let body = RequestBody::SetQuota(pb::SetQuotaRequest {
            user: user.to_owned(),
            produce_bytes_per_second: change.produce,
            fetch_bytes_per_second: change.fetch,
        });
        match self.auth_call(body).await? {
            ResponseBody::SetQuota(r) => Ok(quota_from_wire(r.quota)),
            other => Err(unexpected(&other)),
        }
    }

    /// Sets a user's password (an admin: anyone's; a user: its own).
    pub async fn set_password(&self, name: &str, password: &Secret) -> Result<(), ClientError> {
        let body = RequestBody::SetPassword(pb::SetPasswordRequest {
            name: name.to_owned(),
            password: Some(verifiers(password)?),
        });
        match self.auth_call(body).await? {
            ResponseBody::SetPassword(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Grants permissions on a stream, added to what the user holds (an admin's
    /// request).
    pub async fn grant(
        &self,
        user: &str,
        stream: &str,
        permissions: &[Permission],
    ) -> Result<(), ClientError> {
        let body = RequestBody::GrantAcl(pb::GrantAclRequest {
            user: user.to_owned(),
            stream: stream.to_owned(),
            permissions: permissions.iter().map(|p| permission_to_wire(*p)).collect(),
        });
        match self.auth_call(body).await? {
            ResponseBody::GrantAcl(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Revokes all of a user's permissions on a stream; returns whether it held any.
    pub async fn revoke(&self, user: &str, stream: &str) -> Result<bool, ClientError> {
        let body = RequestBody::RevokeAcl(pb::RevokeAclRequest {
            user: user.to_owned(),
            stream: stream.to_owned(),
        });
        match self.auth_call(body).await? {
            ResponseBody::RevokeAcl(r) => Ok(r.revoked),
            other => Err(unexpected(&other)),
        }
    }

    /// Makes a named token for the connection's user, valid for `expires` if given.
    /// Its string is in the answer and nowhere else.
    pub async fn create_token(
        &self,
        name: &str,
        expires: Option<Duration>,
    ) -> Result<NewToken, ClientError> {
        let body = RequestBody::CreateToken(pb::CreateTokenRequest {
            name: name.to_owned(),
            expires_in_ms: expires.map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64),
        });
        match self.auth_call(body).await? {
            ResponseBody::CreateToken(r) => Ok(NewToken {
                token: Secret::new(r.token),
                expires_ms: r.expires_ms,
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// The connection's user's tokens (an admin's: everyone's).
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>, ClientError> {
        match self
            .auth_call(RequestBody::ListTokens(pb::ListTokensRequest {}))
            .await?
        {
            ResponseBody::ListTokens(r) => Ok(r
                .tokens
                .into_iter()
                .map(|t| TokenInfo {
                    name: t.name,
                    user: t.user,
                    created_ms: t.created_ms,
                    expires_ms: t.expires_ms,
                })
                .collect()),
            other => Err(unexpected(&other)),
        }
    }

    /// Revokes a token (one's own; an admin: anyone's); returns whether it existed.
    pub async fn revoke_token(&self, name: &str) -> Result<bool, ClientError> {
        let body = RequestBody::RevokeToken(pb::RevokeTokenRequest {
            name: name.to_owned(),
        });
        match self.auth_call(body).await? {
            ResponseBody::RevokeToken(r) => Ok(r.revoked),
            other => Err(unexpected(&other)),
        }
    }

    /// Who the client is to the server.
    pub async fn who_am_i(&self) -> Result<WhoAmI, ClientError> {
        match self
            .auth_call(RequestBody::WhoAmI(pb::WhoAmIRequest {}))
            .await?
        {
            ResponseBody::WhoAmI(r) => Ok(WhoAmI {
                user: (!r.user.is_empty()).then_some(r.user),
                role: role_from_wire(r.role),
                token: (!r.token.is_empty()).then_some(r.token),
                auth_required: r.auth_required,
            }),
            other => Err(unexpected(&other)),
        }
    }
}
