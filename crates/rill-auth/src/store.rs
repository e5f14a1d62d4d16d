//! The model of `auth.json` (`docs/SECURITY.md` §2): users with their verifiers and
//! roles, tokens by name with the hash of their string, and per-stream ACLs. Parsing
//! checks every field, so a damaged file is refused rather than read as "no users".
//! Writing it to disk, atomically, is the broker's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::password::{PasswordVerifiers, b64_key, is_argon2id_phc};
use crate::{AuthError, Secret, token};

/// The version this code writes and reads.
pub const VERSION: u32 = 1;
/// Most users a broker keeps (bounds the file and the per-user metrics).
pub const USERS_MAX: usize = 10_000;
/// Most tokens a broker keeps.
pub const TOKENS_MAX: usize = 10_000;
/// Longest user or token name, in bytes.
pub const NAME_BYTES_MAX: usize = 255;

/// A user's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything, including streams, users, tokens and ACLs.
    Admin,
    /// What the user's ACLs grant.
    User,
}

impl Role {
    /// The role's name as the CLI writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
        }
    }

    /// Parses `admin` or `user`.
    pub fn parse(s: &str) -> Result<Self, AuthError> {
        match s {
            "admin" => Ok(Role::Admin),
            "user" => Ok(Role::User),
            _ => Err(AuthError::Invalid(format!(
                "unknown role {s:?} (expected admin or user)"
            ))),
        }
    }
}

/// A permission on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Fetch, offsets, group membership.
    Read,
    /// Produce.
    Write,
    /// Create, alter and delete the stream's topics.
    Manage,
}

impl Permission {
    /// The permission's name as the CLI writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Manage => "manage",
        }
    }

    /// Parses a comma-separated list such as `read,write`; empty and unknown names are
    /// refused.
    pub fn parse_list(s: &str) -> Result<BTreeSet<Permission>, AuthError> {
        let mut out = BTreeSet::new();
        for p in s.split(',') {
            out.insert(match p.trim() {
                "read" => Permission::Read,
                "write" => Permission::Write,
                "manage" => Permission::Manage,
                other => {
                    return Err(AuthError::Invalid(format!(
                        "unknown permission {other:?} (expected read, write or manage)"
                    )));
                }
            });
        }
        Ok(out)
    }
}

/// Smallest quota rate, bytes per second: below it one ordinary batch would be
/// throttled for the longest delay every time.
pub const QUOTA_RATE_MIN: u64 = 1024;

/// A user's byte rates on each node (docs/SECURITY.md §7); `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Bytes of record batches per second the user may produce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub produce_bytes_per_second: Option<u64>,
    /// Bytes of record batches per second the user may fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_bytes_per_second: Option<u64>,
}

impl Quota {
    /// Whether neither rate is limited.
    pub fn is_unlimited(&self) -> bool {
        self.produce_bytes_per_second.is_none() && self.fetch_bytes_per_second.is_none()
    }

    /// Checks both rates against [`QUOTA_RATE_MIN`].
    pub fn validate(&self) -> Result<(), AuthError> {
        for (what, rate) in [
            ("produce", self.produce_bytes_per_second),
            ("fetch", self.fetch_bytes_per_second),
        ] {
            if let Some(r) = rate
                && r < QUOTA_RATE_MIN
            {
                return Err(AuthError::Invalid(format!(
                    "a {what} rate of {r} bytes/s is below the least, {QUOTA_RATE_MIN} bytes/s"
                )));
            }
        }
        Ok(())
    }
}

/// One user.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The role.
    pub role: Role,
    /// When it was made, in ms since the Unix epoch.
    pub created_ms: u64,
    /// The password's verifiers.
    #[serde(flatten)]
    pub password: PasswordVerifiers,
    /// Byte rates; absent from the file when unlimited (files written before quotas).
    #[serde(default, skip_serializing_if = "Quota::is_unlimited")]
    pub quota: Quota,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("role", &self.role)
            .field("created_ms", &self.created_ms)
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

/// One token: whose it is, the hash of its string, and its expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Token {
    /// The user it acts for.
    pub user: String,
    /// SHA-256 of the token string, lowercase hex.
    pub sha256: String,
    /// When it was made, in ms since the Unix epoch.
    pub created_ms: u64,
    /// When it stops working, if ever.
    pub expires_ms: Option<u64>,
}

/// The whole of `auth.json`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    /// Always [`VERSION`].
    pub version: u32,
    /// The secret stand-in SCRAM verifiers are derived from.
    #[serde(with = "b64_key")]
    pub secret: [u8; 32],
    /// Users by name.
    pub users: BTreeMap<String, User>,
    /// Tokens by name.
    pub tokens: BTreeMap<String, Token>,
    /// Per user, per stream, what it may do.
    pub acls: BTreeMap<String, BTreeMap<String, BTreeSet<Permission>>>,
}

impl fmt::Debug for AuthFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthFile")
            .field("users", &self.users)
            .field("tokens", &self.tokens.keys().collect::<Vec<_>>())
            .field("acls", &self.acls)
            .finish_non_exhaustive()
    }
}

/// Checks a user or token name: 1 to 255 bytes of ASCII letters, digits, `.`, `_`, `-`
/// and `@` (an e-mail address works), not starting with `.` or `-`.
pub fn validate_name(kind: &str, name: &str) -> Result<(), AuthError> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(AuthError::Invalid(format!(
            "invalid {kind} name {name:?}: 1 to {NAME_BYTES_MAX} of A-Z a-z 0-9 . _ - @, not starting with . or -"
        )))
    }
}

/// What a presented credential proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The user.
    pub user: String,
    /// The token it came with, if it was a token.
    pub token: Option<String>,
}

impl AuthFile {
    /// A file with no users and a fresh secret.
    pub fn new() -> Self {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        Self {
            version: VERSION,
            secret,
            users: BTreeMap::new(),
            tokens: BTreeMap::new(),
            acls: BTreeMap::new(),
        }
    }

    /// Parses and checks a file's bytes.
    pub fn from_json(bytes: &[u8]) -> Result<Self, AuthError> {
        let file: Self = serde_json::from_slice(bytes)
            .map_err(|e| AuthError::Invalid(format!("auth.json does not parse: {e}")))?;
        file.validate()?;
        Ok(file)
    }

    /// The file's bytes.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("the model serialises");
        out.push(b'\n');
        out
    }

    /// Checks every field; what [`AuthFile::from_json`] runs.
    pub fn validate(&self) -> Result<(), AuthError> {
        let bad = |m: String| Err(AuthError::Invalid(format!("auth.json: {m}")));
        if self.version != VERSION {
            return bad(format!(
                "version {} (this build reads {VERSION})",
                self.version
            ));
        }
        if self.users.len() > USERS_MAX || self.tokens.len() > TOKENS_MAX {
            return bad("more users or tokens than the bounds".into());
        }
        for (name, user) in &self.users {
            validate_name("user", name)?;
            if !is_argon2id_phc(&user.password.argon2id) {
                return bad(format!("user {name:?} has no valid Argon2id hash"));
            }
            user.password.scram.validate()?;
            user.quota
                .validate()
                .or_else(|e| bad(format!("user {name:?}: {e}")))?;
        }
        for (name, t) in &self.tokens {
            validate_name("token", name)?;
            if !self.users.contains_key(&t.user) {
                return bad(format!("token {name:?} belongs to no user"));
            }
            if !token::is_hash(&t.sha256) {
                return bad(format!("token {name:?} has no valid hash"));
            }
        }
        for (user, streams) in &self.acls {
            if !self.users.contains_key(user) {
                return bad(format!("ACL of {user:?}, who is not a user"));
            }
            if streams.values().any(BTreeSet::is_empty) {
                return bad(format!("an empty ACL of {user:?}"));
            }
        }
        Ok(())
    }

    /// Adds a user. Fails if it exists or the bound is reached.
    pub fn add_user(
        &mut self,
        name: &str,
        role: Role,
        password: &Secret,
        iterations: u32,
        now_ms: u64,
    ) -> Result<(), AuthError> {
        let password = PasswordVerifiers::derive(password, iterations)?;
        self.insert_user(name, role, password, now_ms)
    }

    /// Adds a user whose password a client already derived. Fails if it exists or the
    /// bound is reached.
    pub fn insert_user(
        &mut self,
        name: &str,
        role: Role,
        password: PasswordVerifiers,
        now_ms: u64,
    ) -> Result<(), AuthError> {
        validate_name("user", name)?;
        if self.users.contains_key(name) {
            return Err(AuthError::Invalid(format!("user {name:?} exists")));
        }
        if self.users.len() >= USERS_MAX {
            return Err(AuthError::Invalid(format!("at most {USERS_MAX} users")));
        }
        self.users.insert(
            name.to_owned(),
            User {
                role,
                created_ms: now_ms,
                password,
                quota: Quota::default(),
            },
        );
        Ok(())
    }

    /// Sets a user's quota. Fails if there is no such user or a rate is too small.
    pub fn set_quota(&mut self, name: &str, quota: Quota) -> Result<(), AuthError> {
        quota.validate()?;
        let user = self
            .users
            .get_mut(name)
            .ok_or_else(|| AuthError::Invalid(format!("no user {name:?}")))?;
        user.quota = quota;
        Ok(())
    }

    /// A user's quota; unlimited for an unknown one.
    pub fn quota(&self, name: &str) -> Quota {
        self.users.get(name).map(|u| u.quota).unwrap_or_default()
    }

    /// Sets a user's password.
    pub fn set_password(
        &mut self,
        name: &str,
        password: &Secret,
        iterations: u32,
    ) -> Result<(), AuthError> {
        let verifiers = PasswordVerifiers::derive(password, iterations)?;
        let user = self
            .users
            .get_mut(name)
            .ok_or_else(|| AuthError::Invalid(format!("no user {name:?}")))?;
        user.password = verifiers;
        Ok(())
    }

    /// Removes a user with its tokens and ACLs. Returns whether it existed.
    pub fn remove_user(&mut self, name: &str) -> bool {
        self.tokens.retain(|_, t| t.user != name);
        self.acls.remove(name);
        self.users.remove(name).is_some()
    }

    /// Grants permissions on a stream (added to what the user holds).
    pub fn grant(
        &mut self,
        user: &str,
        stream: &str,
        permissions: &BTreeSet<Permission>,
    ) -> Result<(), AuthError> {
        if !self.users.contains_key(user) {
            return Err(AuthError::Invalid(format!("no user {user:?}")));
        }
        if permissions.is_empty() {
            return Err(AuthError::Invalid("no permission to grant".into()));
        }
        self.acls
            .entry(user.to_owned())
            .or_default()
            .entry(stream.to_owned())
            .or_default()
            .extend(permissions.iter().copied());
        Ok(())
    }

    /// Revokes all of a user's permissions on a stream. Returns whether it held any.
    pub fn revoke(&mut self, user: &str, stream: &str) -> bool {
        let Some(streams) = self.acls.get_mut(user) else {
            return false;
        };
        let had = streams.remove(stream).is_some();
        if streams.is_empty() {
            self.acls.remove(user);
        }
        had
    }

    /// Makes a token for `user`; returns its string, to be shown once.
    pub fn add_token(
        &mut self,
        name: &str,
        user: &str,
        now_ms: u64,
        expires_ms: Option<u64>,
    ) -> Result<Secret, AuthError> {
        validate_name("token", name)?;
        if !self.users.contains_key(user) {
            return Err(AuthError::Invalid(format!("no user {user:?}")));
        }
        if self.tokens.contains_key(name) {
            return Err(AuthError::Invalid(format!("token {name:?} exists")));
        }
        if self.tokens.len() >= TOKENS_MAX {
            return Err(AuthError::Invalid(format!("at most {TOKENS_MAX} tokens")));
        }
        let (secret, sha256) = token::generate();
        self.tokens.insert(
            name.to_owned(),
            Token {
                user: user.to_owned(),
                sha256,
                created_ms: now_ms,
                expires_ms,
            },
        );
        Ok(secret)
    }

    /// Revokes a token. Returns whether it existed.
    pub fn remove_token(&mut self, name: &str) -> bool {
        self.tokens.remove(name).is_some()
    }

    /// Checks a token string at `now_ms`: it must have the token shape, match a stored
    /// hash, be unexpired and belong to a user. Every failure is
    /// [`AuthError::Failed`] or a malformed token.
    pub fn authenticate_token(
        &self,
        presented: &Secret,
        now_ms: u64,
    ) -> Result<Authenticated, AuthError> {
        token::check_shape(presented)?;
        let hash = token::hash(presented);
        let (name, t) = self
            .tokens
            .iter()
            .find(|(_, t)| t.sha256 == hash)
            .ok_or(AuthError::Failed)?;
        if t.expires_ms.is_some_and(|e| now_ms >= e) || !self.users.contains_key(&t.user) {
            return Err(AuthError::Failed);
        }
        Ok(Authenticated {
            user: t.user.clone(),
            token: Some(name.clone()),
        })
    }

    /// Checks a user name and password against the Argon2id hash (HTTP Basic,
    /// docs/SECURITY.md §6). An unknown user costs one Argon2id hash too, so the time
    /// does not tell whether the user exists; every failure is [`AuthError::Failed`].
    pub fn authenticate_password(
        &self,
        user: &str,
        password: &Secret,
    ) -> Result<Authenticated, AuthError> {
        let phc = self.users.get(user).map(|u| u.password.argon2id.as_str());
        if crate::password::check_password(phc, password) {
            Ok(Authenticated {
                user: user.to_owned(),
                token: None,
            })
        } else {
            Err(AuthError::Failed)
        }
    }

    /// Whether an authenticated principal is still valid at `now_ms`: the user exists
    /// and, if it came with a token, the token still exists, is the user's and is
    /// unexpired (`docs/SECURITY.md` §3.3).
    pub fn still_valid(&self, who: &Authenticated, now_ms: u64) -> bool {
        self.users.contains_key(&who.user)
            && who.token.as_ref().is_none_or(|name| {
                self.tokens
                    .get(name)
                    .is_some_and(|t| t.user == who.user && t.expires_ms.is_none_or(|e| now_ms < e))
            })
    }

    /// Whether `user` may do `permission` on `stream`: admins may do everything.
    pub fn allows(&self, user: &str, stream: &str, permission: Permission) -> bool {
        match self.users.get(user) {
            Some(u) if u.role == Role::Admin => true,
            Some(_) => self
                .acls
                .get(user)
                .and_then(|s| s.get(stream))
                .is_some_and(|p| p.contains(&permission)),
            None => false,
        }
    }

    /// The role of `user`, if it exists.
    pub fn role(&self, user: &str) -> Option<Role> {
        self.users.get(user).map(|u| u.role)
    }
}

impl Default for AuthFile {
    fn default() -> Self {
        Self::new()
    }
}
