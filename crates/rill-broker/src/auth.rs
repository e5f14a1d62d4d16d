//! Who makes a request and what it may do (docs/SECURITY.md): the broker's copy of
//! `auth.json`, the `Authenticate` exchange of a session, the admin requests on users,
//! ACLs and tokens, and the one authorization check every request passes in
//! [`Broker::handle_as`](crate::Broker).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use rill_auth::limiter::{Limiter, LimiterConfig};
use rill_auth::password::{PasswordVerifiers, ScramVerifier, is_argon2id_phc};
use rill_auth::scram::{self, ServerAwaitingFinal};
use rill_auth::store::{AuthFile, Authenticated, Permission, Quota, Role};
use rill_auth::{AuthError, Secret};
use rill_proto::RequestBody;
use rill_proto::pb;
use rill_storage::Io;

use crate::BrokerError;
use crate::catalog::{catalog_err, read_file, replace_private_file};

/// The file credentials live in, next to `catalog.json`.
pub(crate) const AUTH_FILE: &str = "auth.json";
/// Largest `auth.json` read (10,000 users with their verifiers fit well within it).
const AUTH_BYTES_MAX: u64 = 64 << 20;
/// How long a SCRAM exchange may stay half done.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The mechanism name of a bearer token.
pub const TOKEN_MECHANISM: &str = "TOKEN";

/// Who makes a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Embedded mode: the process that opened the data directory.
    Owner,
    /// A server without `--auth`: everyone may do everything, as before security.
    Anonymous,
    /// A connection to an `--auth` server that has not authenticated.
    Unauthenticated,
    /// An authenticated user (by password or token).
    User(Authenticated),
}

/// A credential on an HTTP request (docs/SECURITY.md §6). `Debug` shows no secret.
#[derive(Debug)]
pub enum HttpCredential {
    /// `Authorization: Basic`, checked with Argon2id.
    Basic {
        /// The user.
        user: String,
        /// The password.
        password: Secret,
    },
    /// `Authorization: Bearer`, an API token.
    Bearer(Secret),
}

impl HttpCredential {
    /// A user name and password (HTTP Basic).
    pub fn basic(user: impl Into<String>, password: impl Into<String>) -> Self {
        HttpCredential::Basic {
            user: user.into(),
            password: Secret::new(password.into()),
        }
    }

    /// An API token (HTTP Bearer).
    pub fn bearer(token: impl Into<String>) -> Self {
        HttpCredential::Bearer(Secret::new(token.into()))
    }
}

/// What a request needs (docs/SECURITY.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing: `Hello`, `Authenticate`.
    Nothing,
    /// Any authenticated user.
    AnyUser,
    /// The `admin` role.
    Admin,
    /// One of these permissions on a stream.
    Stream(String, &'static [Permission]),
}

const READ: &[Permission] = &[Permission::Read];
const WRITE: &[Permission] = &[Permission::Write];
const MANAGE: &[Permission] = &[Permission::Manage];
const ANY: &[Permission] = &[Permission::Read, Permission::Write, Permission::Manage];

/// The table of docs/SECURITY.md §4. Exhaustive: a new request kind does not compile
/// until it is placed here.
pub(crate) fn need(body: &RequestBody) -> Need {
    use RequestBody as R;
    let on = |stream: &str, p| Need::Stream(stream.to_owned(), p);
    match body {
        R::Hello(_) | R::Authenticate(_) => Need::Nothing,
        R::WhoAmI(_) | R::CreateToken(_) | R::ListTokens(_) | R::RevokeToken(_) => Need::AnyUser,
        // Checked further in the handler: a user may set only their own password.
        R::SetPassword(_) => Need::AnyUser,
        // Filtered in the handler to the streams a user holds an ACL on.
        R::ListStreams(_) => Need::AnyUser,
        R::ListTopics(r) if r.stream.is_empty() => Need::AnyUser,
        R::ListTopics(r) => on(&r.stream, ANY),
        R::CreateStream(_)
        | R::DeleteStream(_)
        | R::RepairPartition(_)
        | R::ClusterStatus(_)
        | R::CreateUser(_)
        | R::DeleteUser(_)
        | R::ListUsers(_)
        | R::GrantAcl(_)
        | R::RevokeAcl(_)
        | R::SetQuota(_) => Need::Admin,
        R::CreateTopic(r) => on(&r.stream, MANAGE),
        R::DeleteTopic(r) => on(&r.stream, MANAGE),
        R::AlterTopic(r) => on(&r.stream, MANAGE),
        R::SplitRange(r) => on(&r.stream, MANAGE),
        R::MergeRanges(r) => on(&r.stream, MANAGE),
        // Deletes records, as deleting the topic does.
        R::PurgeTopic(r) => on(&r.stream, MANAGE),
        R::DescribeTopic(r) => on(&r.stream, ANY),
        // A producer id is not tied to a stream; asking for one is the start of writing.
        R::InitProducer(_) => Need::AnyUser,
        R::Produce(r) => on(&r.stream, WRITE),
        R::Fetch(r) => on(&r.stream, READ),
        R::ResolveOffset(r) => on(&r.stream, READ),
        R::StoreOffset(r) => on(&r.stream, READ),
        R::GetOffset(r) => on(&r.stream, READ),
        R::DeleteOffset(r) => on(&r.stream, READ),
        R::JoinGroup(r) => on(&r.stream, READ),
        R::GroupHeartbeat(r) => on(&r.stream, READ),
        R::LeaveGroup(r) => on(&r.stream, READ),
        R::CommitGroupOffset(r) => on(&r.stream, READ),
        R::DescribeGroup(r) => on(&r.stream, READ),
        R::DeleteGroupOffset(r) => on(&r.stream, READ),
        // What a reader may do one offset at a time (store, delete), for a whole group
        // or consumer at once.
        R::ListGroups(r) => on(&r.stream, READ),
        R::ListConsumers(r) => on(&r.stream, READ),
        R::DeleteGroup(r) => on(&r.stream, READ),
        R::ResetGroupOffsets(r) => on(&r.stream, READ),
        R::ResetConsumerOffsets(r) => on(&r.stream, READ),
        // A subscription is a stream of fetches, each of which is checked as one.
        R::Subscribe(r) => on(&r.stream, READ),
        // They act only on the connection's own subscriptions, which a Subscribe this
        // table allowed opened.
        R::Credit(_) | R::Unsubscribe(_) => Need::Nothing,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A half-done SCRAM exchange of a session.
#[derive(Debug)]
pub(crate) struct Exchange {
    state: ServerAwaitingFinal,
    started: Instant,
}

/// The broker's credentials: `auth.json` in memory, written through on every change.
#[derive(Debug)]
pub(crate) struct Auth {
    required: bool,
    iterations: u32,
    file: RwLock<AuthFile>,
    /// Serialises changes and their writes.
    changes: Mutex<()>,
    limiter: Mutex<Limiter>,
    /// On a cluster node: the metadata group that holds the file (docs/SECURITY.md
    /// §2.3), and the version of it `file` holds (0: none applied yet).
    cluster: std::sync::OnceLock<std::sync::Arc<dyn crate::cluster::Cluster>>,
    cluster_version: Mutex<u64>,
}

/// How many times a change is redone against a newer file before it gives up.
const CLUSTER_CHANGE_TRIES: usize = 5;
/// How long a change waits for this node to apply a newer file after a conflict.
const CLUSTER_MIRROR_WAIT: Duration = Duration::from_secs(10);

fn auth_invalid(path: &Path, e: &AuthError) -> BrokerError {
    catalog_err("parse", path)(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        e.to_string(),
    ))
}

fn invalid(e: AuthError) -> BrokerError {
    BrokerError::InvalidRequest(e.to_string())
}

fn denied(what: &str) -> BrokerError {
    BrokerError::PermissionDenied(what.to_owned())
}

fn failed() -> BrokerError {
    BrokerError::Unauthenticated("authentication failed".into())
}

impl Auth {
    /// Loads `auth.json` if it exists; a damaged one fails the open. A stale
    /// `auth.json.tmp` (a crash before its rename) is removed.
    pub(crate) fn open(
        io: &dyn Io,
        dir: &Path,
        required: bool,
        iterations: u32,
    ) -> Result<Self, BrokerError> {
        rill_auth::password::check_iterations(iterations)
            .map_err(|e| BrokerError::InvalidConfig(e.to_string()))?;
        let path = dir.join(AUTH_FILE);
        let tmp = dir.join(format!("{AUTH_FILE}.tmp"));
        if io.exists(&tmp) {
            io.remove_file(&tmp).map_err(catalog_err("remove", &tmp))?;
        }
        let file = if io.exists(&path) {
            // A file written before Rill restricted its mode, or loosened by hand. One
            // this process may read but not chmod (another owner's) is still served.
            if let Err(e) = io.restrict_to_owner(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot make auth.json readable by its owner only");
            }
            let bytes = read_file(io, &path, AUTH_BYTES_MAX).map_err(catalog_err("read", &path))?;
            AuthFile::from_json(&bytes).map_err(|e| auth_invalid(&path, &e))?
        } else {
            AuthFile::new()
        };
        Ok(Self {
            required,
            iterations,
            file: RwLock::new(file),
            changes: Mutex::new(()),
            limiter: Mutex::new(Limiter::new(LimiterConfig::default())),
            cluster: std::sync::OnceLock::new(),
            cluster_version: Mutex::new(0),
        })
    }

    /// Makes the metadata group the file's home (a cluster node).
    pub(crate) fn attach_cluster(&self, cluster: std::sync::Arc<dyn crate::cluster::Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// Takes the cluster's file at `version` if it is newer than the one held. A file
    /// that does not parse (never proposed: the proposer parsed it) is logged and
    /// skipped, and the one held stays.
    pub(crate) fn apply_cluster(&self, version: u64, text: &str) {
        let mut held = self.cluster_version.lock();
        if version <= *held {
            return;
        }
        match AuthFile::from_json(text.as_bytes()) {
            Ok(file) => {
                *self.file.write() = file;
                *held = version;
            }
            Err(e) => {
                tracing::error!(version, error = %e, "the cluster's credentials do not parse: keeping the previous ones");
            }
        }
    }

    /// On a cluster node whose metadata has no credentials yet: proposes this node's
    /// own `auth.json` (made with `rill user create --data` before the first start).
    /// The first node to do so wins; the others are told it was not taken.
    pub(crate) fn adopt_local(&self) -> Result<(), BrokerError> {
        let Some(cluster) = self.cluster.get() else {
            return Ok(());
        };
        let _one = self.changes.lock();
        if *self.cluster_version.lock() != 0 || !self.has_users() {
            return Ok(());
        }
        let file = self.file.read().clone();
        match propose(cluster.as_ref(), 0, &file)? {
            (crate::cluster::CatalogOutcome::Done, text) => {
                self.apply_cluster(1, &text);
                tracing::info!("this node's auth.json became the cluster's credentials");
            }
            _ => tracing::warn!(
                "the cluster has credentials already: this node's auth.json was not taken"
            ),
        }
        Ok(())
    }

    /// A user's quota; unlimited for an unknown one.
    pub(crate) fn quota(&self, user: &str) -> Quota {
        self.file.read().quota(user)
    }

    /// Whether `user` exists.
    pub(crate) fn user_exists(&self, user: &str) -> bool {
        self.file.read().users.contains_key(user)
    }

    /// Applies `change` to a copy of the file, writes it, then makes it current. A
    /// failed change or write leaves the file and memory as they were.
    ///
    /// On a cluster node the file is the metadata group's (docs/SECURITY.md §2.3): the
    /// change is made against the version held and proposed as a compare-and-set,
    /// redone against a newer one on a conflict. Call it where blocking is allowed
    /// (it waits for the cluster).
    fn change<T>(
        &self,
        io: &dyn Io,
        dir: &Path,
        mut change: impl FnMut(&mut AuthFile) -> Result<T, BrokerError>,
    ) -> Result<T, BrokerError> {
        let _one = self.changes.lock();
        if let Some(cluster) = self.cluster.get() {
            for _ in 0..CLUSTER_CHANGE_TRIES {
                let version = *self.cluster_version.lock();
                let mut next = self.file.read().clone();
                let out = change(&mut next)?;
                match propose(cluster.as_ref(), version, &next)? {
                    (crate::cluster::CatalogOutcome::Done, text) => {
                        self.apply_cluster(version + 1, &text);
                        return Ok(out);
                    }
                    (crate::cluster::CatalogOutcome::Conflict(why), _) => {
                        tracing::debug!(
                            version,
                            why,
                            "credentials changed meanwhile: redoing the change"
                        );
                        let deadline = Instant::now() + CLUSTER_MIRROR_WAIT;
                        while *self.cluster_version.lock() == version && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    (other, _) => {
                        return Err(BrokerError::Internal(format!(
                            "replacing the credentials answered {other:?}"
                        )));
                    }
                }
            }
            return Err(BrokerError::ClusterTimeout(
                "the credentials kept changing under this change; retry it".into(),
            ));
        }
        let mut next = self.file.read().clone();
        let out = change(&mut next)?;
        replace_private_file(io, dir, AUTH_FILE, &next.to_json())?;
        *self.file.write() = next;
        Ok(out)
    }

    pub(crate) fn required(&self) -> bool {
        self.required
    }

    /// The principal a new connection starts as.
    pub(crate) fn initial(&self) -> Principal {
        if self.required {
            Principal::Unauthenticated
        } else {
            Principal::Anonymous
        }
    }

    /// Whether the file has any user (a server with `--auth` and none cannot be used).
    pub(crate) fn has_users(&self) -> bool {
        !self.file.read().users.is_empty()
    }

    /// Checks `principal` against what `body` needs.
    pub(crate) fn authorize(
        &self,
        principal: &Principal,
        body: &RequestBody,
    ) -> Result<(), BrokerError> {
        let need = need(body);
        let who = match principal {
            Principal::Owner | Principal::Anonymous => return Ok(()),
            Principal::Unauthenticated => {
                return if need == Need::Nothing {
                    Ok(())
                } else {
                    Err(BrokerError::Unauthenticated(
                        "this server requires authentication; give a user and password or a token"
                            .into(),
                    ))
                };
            }
            Principal::User(who) => who,
        };
        let file = self.file.read();
        if !file.still_valid(who, now_ms()) {
            return Err(BrokerError::Unauthenticated(
                "the credential of this connection no longer holds (user deleted, token revoked or expired); authenticate again"
                    .into(),
            ));
        }
        match need {
            Need::Nothing | Need::AnyUser => Ok(()),
            Need::Admin if file.role(&who.user) == Some(Role::Admin) => Ok(()),
            Need::Admin => Err(denied("this request needs the admin role")),
            Need::Stream(stream, any_of) => {
                if any_of.iter().any(|p| file.allows(&who.user, &stream, *p)) {
                    Ok(())
                } else {
                    let names: Vec<_> = any_of.iter().map(|p| p.as_str()).collect();
                    Err(denied(&format!(
                        "this request needs {} on stream {stream:?}",
                        names.join(" or ")
                    )))
                }
            }
        }
    }

    /// Whether a user principal may see `stream` in a listing.
    pub(crate) fn may_list(&self, principal: &Principal, stream: &str) -> bool {
        match principal {
            Principal::User(who) => {
                let file = self.file.read();
                ANY.iter().any(|p| file.allows(&who.user, stream, *p))
            }
            _ => true,
        }
    }

    /// One step of `Authenticate` on a session.
    pub(crate) fn authenticate(
        &self,
        principal: &RwLock<Principal>,
        exchange: &Mutex<Option<Exchange>>,
        peer: Option<IpAddr>,
        by_certificate: bool,
        r: &pb::AuthenticateRequest,
    ) -> Result<pb::AuthenticateResponse, BrokerError> {
        if !self.required {
            return Err(BrokerError::InvalidRequest(
                "this server does not require authentication".into(),
            ));
        }
        if !by_certificate && matches!(*principal.read(), Principal::User(_)) {
            return Err(BrokerError::InvalidRequest(
                "this connection is authenticated already".into(),
            ));
        }
        let now = Instant::now();
        self.not_limited(peer, now)?;
        let outcome = self.step(exchange, r, now);
        match &outcome {
            Err(e) => {
                *exchange.lock() = None;
                if let Some(addr) = peer {
                    self.limiter.lock().fail(addr, now);
                }
                tracing::info!(?peer, mechanism = %r.mechanism, reason = %e, "authentication failed");
            }
            Ok((_, Some(who))) => {
                tracing::info!(?peer, user = %who.user, token = ?who.token, "authenticated");
                *principal.write() = Principal::User(who.clone());
            }
            Ok((_, None)) => {}
        }
        outcome.map(|(response, _)| response).map_err(|_| failed())
    }

    /// The user a client certificate names, if authentication is required and the
    /// user exists.
    pub(crate) fn certificate_user(&self, name: &str) -> Option<Authenticated> {
        if !self.required || !self.file.read().users.contains_key(name) {
            return None;
        }
        Some(Authenticated {
            user: name.to_owned(),
            token: None,
        })
    }

    /// Checks an HTTP credential under the failure limiter.
    pub(crate) fn authenticate_http(
        &self,
        peer: Option<IpAddr>,
        credential: &HttpCredential,
    ) -> Result<Principal, BrokerError> {
        if !self.required {
            return Ok(Principal::Anonymous);
        }
        let now = Instant::now();
        self.not_limited(peer, now)?;
        let outcome = match credential {
            HttpCredential::Basic { user, password } => {
                // The hash runs without the file's lock held: a writer waiting for it
                // would hold up every request's authorization.
                let phc = self
                    .file
                    .read()
                    .users
                    .get(user)
                    .map(|u| u.password.argon2id.clone());
                if rill_auth::password::check_password(phc.as_deref(), password) {
                    Ok(Authenticated {
                        user: user.clone(),
                        token: None,
                    })
                } else {
                    Err(AuthError::Failed)
                }
            }
            HttpCredential::Bearer(token) => self.file.read().authenticate_token(token, now_ms()),
        };
        match outcome {
            Ok(who) => Ok(Principal::User(who)),
            Err(e) => {
                if let Some(addr) = peer {
                    self.limiter.lock().fail(addr, now);
                }
                tracing::info!(?peer, reason = %e, "HTTP authentication failed");
                Err(failed())
            }
        }
    }

    fn step(
        &self,
        exchange: &Mutex<Option<Exchange>>,
        r: &pb::AuthenticateRequest,
        now: Instant,
    ) -> Result<(pb::AuthenticateResponse, Option<Authenticated>), AuthError> {
        match r.mechanism.as_str() {
            TOKEN_MECHANISM => {
                let token = Secret::new(
                    String::from_utf8(r.data.clone()).map_err(|_| AuthError::Malformed("token"))?,
                );
                let who = self.file.read().authenticate_token(&token, now_ms())?;
                Ok((done(&who), Some(who)))
            }
            scram::MECHANISM => {
                let mut slot = exchange.lock();
                match slot.take() {
                    // A live exchange: this is the client-final message.
                    Some(x) if now.duration_since(x.started) < EXCHANGE_TIMEOUT => {
                        let (user, server_final) = x.state.on_client_final(&r.data)?;
                        let who = Authenticated { user, token: None };
                        let mut response = done(&who);
                        response.data = server_final;
                        Ok((response, Some(who)))
                    }
                    Some(_) => Err(AuthError::OutOfOrder),
                    None => {
                        let file = self.file.read();
                        let server = scram::Server {
                            secret: &file.secret,
                            iterations: self.iterations,
                        };
                        let (state, server_first) = server.on_client_first(&r.data, |name| {
                            file.users.get(name).map(|u| u.password.scram.clone())
                        })?;
                        *slot = Some(Exchange {
                            state,
                            started: now,
                        });
                        Ok((
                            pb::AuthenticateResponse {
                                data: server_first,
                                done: false,
                                user: String::new(),
                            },
                            None,
                        ))
                    }
                }
            }
            _ => Err(AuthError::Malformed("mechanism")),
        }
    }

    /// `UNAUTHENTICATED` without a check while `peer` is closed to logins (§3.4).
    fn not_limited(&self, peer: Option<IpAddr>, now: Instant) -> Result<(), BrokerError> {
        if let Some(addr) = peer
            && let Some(wait) = self.limiter.lock().check(addr, now)
        {
            return Err(BrokerError::Unauthenticated(format!(
                "too many failed attempts; retry in {} s",
                wait.as_secs().max(1)
            )));
        }
        Ok(())
    }

    /// Makes the first admin from a password, if the file has no user yet. Returns
    /// whether it did.
    pub(crate) fn bootstrap_admin(
        &self,
        io: &dyn Io,
        dir: &Path,
        password: &Secret,
    ) -> Result<bool, BrokerError> {
        if self.has_users() {
            return Ok(false);
        }
        let iterations = self.iterations;
        // Checked again inside: on a cluster node another may have made one meanwhile.
        self.change(io, dir, |f| {
            if !f.users.is_empty() {
                return Ok(false);
            }
            f.add_user("admin", Role::Admin, password, iterations, now_ms())
                .map_err(invalid)?;
            Ok(true)
        })
    }

    /// The admin requests on users, ACLs and tokens, and `WhoAmI`.
    pub(crate) fn admin(
        &self,
        io: &dyn Io,
        dir: &Path,
        principal: &Principal,
        body: &RequestBody,
    ) -> Result<rill_proto::ResponseBody, BrokerError> {
        use rill_proto::ResponseBody as Out;
        let me = match principal {
            Principal::User(who) => Some(who),
            _ => None,
        };
        let is_admin = match me {
            Some(who) => self.file.read().role(&who.user) == Some(Role::Admin),
            None => true,
        };
        Ok(match body {
            RequestBody::WhoAmI(_) => Out::WhoAmI(pb::WhoAmIResponse {
                user: me.map(|w| w.user.clone()).unwrap_or_default(),
                role: me
                    .and_then(|w| self.file.read().role(&w.user))
                    .map_or(pb::Role::Unspecified, role_to_proto) as i32,
                token: me.and_then(|w| w.token.clone()).unwrap_or_default(),
                auth_required: self.required,
            }),
            RequestBody::CreateUser(r) => {
                let role = role_from_proto(r.role)?;
                let verifiers = verifiers_from_proto(r.password.as_ref())?;
                let quota = quota_from_proto(r.quota.unwrap_or_default());
                quota.validate().map_err(invalid)?;
                self.change(io, dir, |f| {
                    f.insert_user(&r.name, role, verifiers.clone(), now_ms())
                        .map_err(invalid)?;
                    f.set_quota(&r.name, quota).map_err(invalid)
                })?;
                Out::CreateUser(pb::CreateUserResponse {})
            }
            RequestBody::SetQuota(r) => {
                let quota = self.change(io, dir, |f| {
                    if !f.users.contains_key(&r.user) {
                        return Err(BrokerError::InvalidRequest(format!("no user {:?}", r.user)));
                    }
                    let mut quota = f.quota(&r.user);
                    let change = |rate: Option<u64>, old: Option<u64>| match rate {
                        None => old,
                        Some(0) => None,
                        Some(r) => Some(r),
                    };
                    quota.produce_bytes_per_second =
                        change(r.produce_bytes_per_second, quota.produce_bytes_per_second);
                    quota.fetch_bytes_per_second =
                        change(r.fetch_bytes_per_second, quota.fetch_bytes_per_second);
                    f.set_quota(&r.user, quota).map_err(invalid)?;
                    Ok(quota)
                })?;
                Out::SetQuota(pb::SetQuotaResponse {
                    quota: Some(quota_to_proto(quota)),
                })
            }
            RequestBody::DeleteUser(r) => {
                if me.is_some_and(|w| w.user == r.name) {
                    return Err(BrokerError::InvalidRequest(
                        "a user cannot delete itself".into(),
                    ));
                }
                let deleted = self.change(io, dir, |f| Ok(f.remove_user(&r.name)))?;
                Out::DeleteUser(pb::DeleteUserResponse { deleted })
            }
            RequestBody::ListUsers(_) => {
                let file = self.file.read();
                Out::ListUsers(pb::ListUsersResponse {
                    users: file
                        .users
                        .iter()
                        .map(|(name, u)| pb::UserInfo {
                            name: name.clone(),
                            role: role_to_proto(u.role) as i32,
                            created_ms: u.created_ms,
                            quota: Some(quota_to_proto(u.quota)),
                            acls: file
                                .acls
                                .get(name)
                                .into_iter()
                                .flatten()
                                .map(|(stream, ps)| pb::AclEntry {
                                    stream: stream.clone(),
                                    permissions: ps
                                        .iter()
                                        .map(|p| permission_to_proto(*p) as i32)
                                        .collect(),
                                })
                                .collect(),
                        })
                        .collect(),
                })
            }
            RequestBody::SetPassword(r) => {
                if !is_admin && me.is_none_or(|w| w.user != r.name) {
                    return Err(denied("only an admin sets another user's password"));
                }
                let verifiers = verifiers_from_proto(r.password.as_ref())?;
                self.change(io, dir, |f| {
                    let user = f.users.get_mut(&r.name).ok_or_else(|| {
                        BrokerError::InvalidRequest(format!("no user {:?}", r.name))
                    })?;
                    user.password = verifiers.clone();
                    Ok(())
                })?;
                Out::SetPassword(pb::SetPasswordResponse {})
            }
            RequestBody::GrantAcl(r) => {
                crate::validate_name("stream", &r.stream)?;
                let permissions = r
                    .permissions
                    .iter()
                    .map(|p| permission_from_proto(*p))
                    .collect::<Result<BTreeSet<_>, _>>()?;
                self.change(io, dir, |f| {
                    f.grant(&r.user, &r.stream, &permissions).map_err(invalid)
                })?;
                Out::GrantAcl(pb::GrantAclResponse {})
            }
            RequestBody::RevokeAcl(r) => {
                let revoked = self.change(io, dir, |f| Ok(f.revoke(&r.user, &r.stream)))?;
                Out::RevokeAcl(pb::RevokeAclResponse { revoked })
            }
            RequestBody::CreateToken(r) => {
                let Some(who) = me else {
                    return Err(BrokerError::InvalidRequest(
                        "a token belongs to a user: authenticate first (the data directory's owner has no user)".into(),
                    ));
                };
                let now = now_ms();
                let expires_ms = r.expires_in_ms.map(|d| now.saturating_add(d));
                let token = self.change(io, dir, |f| {
                    f.add_token(&r.name, &who.user, now, expires_ms)
                        .map_err(invalid)
                })?;
                Out::CreateToken(pb::CreateTokenResponse {
                    token: token.expose().to_owned(),
                    expires_ms,
                })
            }
            RequestBody::ListTokens(_) => {
                let file = self.file.read();
                Out::ListTokens(pb::ListTokensResponse {
                    tokens: file
                        .tokens
                        .iter()
                        .filter(|(_, t)| is_admin || me.is_some_and(|w| w.user == t.user))
                        .map(|(name, t)| pb::TokenInfo {
                            name: name.clone(),
                            user: t.user.clone(),
                            created_ms: t.created_ms,
                            expires_ms: t.expires_ms,
                        })
                        .collect(),
                })
            }
            RequestBody::RevokeToken(r) => {
                let revoked = self.change(io, dir, |f| {
                    match f.tokens.get(&r.name) {
                        Some(t) if !is_admin && me.is_none_or(|w| w.user != t.user) => {
                            return Err(denied("only an admin revokes another user's token"));
                        }
                        _ => {}
                    }
                    Ok(f.remove_token(&r.name))
                })?;
                Out::RevokeToken(pb::RevokeTokenResponse { revoked })
            }
            _ => {
                return Err(BrokerError::Internal(
                    "not an authentication request".into(),
                ));
            }
        })
    }
}

/// Proposes `file` as the cluster's credentials at `expected` and waits for the answer
/// (where blocking is allowed); returns it with the text proposed.
fn propose(
    cluster: &dyn crate::cluster::Cluster,
    expected: u64,
    file: &AuthFile,
) -> Result<(crate::cluster::CatalogOutcome, std::sync::Arc<str>), BrokerError> {
    let text: std::sync::Arc<str> = String::from_utf8_lossy(&file.to_json()).into();
    let handle = tokio::runtime::Handle::current();
    let outcome = handle.block_on(cluster.replace_auth(expected, std::sync::Arc::clone(&text)))?;
    Ok((outcome, text))
}

fn done(who: &Authenticated) -> pb::AuthenticateResponse {
    pb::AuthenticateResponse {
        data: Vec::new(),
        done: true,
        user: who.user.clone(),
    }
}

/// Whether a request is one [`Auth::admin`] answers.
pub(crate) fn is_auth_request(body: &RequestBody) -> bool {
    use RequestBody as R;
    matches!(
        body,
        R::WhoAmI(_)
            | R::CreateUser(_)
            | R::DeleteUser(_)
            | R::ListUsers(_)
            | R::SetPassword(_)
            | R::GrantAcl(_)
            | R::RevokeAcl(_)
            | R::CreateToken(_)
            | R::ListTokens(_)
            | R::RevokeToken(_)
            | R::SetQuota(_)
    )
}

fn quota_from_proto(q: pb::Quota) -> Quota {
    let rate = |r: u64| (r != 0).then_some(r);
    Quota {
        produce_bytes_per_second: rate(q.produce_bytes_per_second),
        fetch_bytes_per_second: rate(q.fetch_bytes_per_second),
    }
}

fn quota_to_proto(q: Quota) -> pb::Quota {
    pb::Quota {
        produce_bytes_per_second: q.produce_bytes_per_second.unwrap_or(0),
        fetch_bytes_per_second: q.fetch_bytes_per_second.unwrap_or(0),
    }
}

fn role_to_proto(role: Role) -> pb::Role {
    match role {
        Role::Admin => pb::Role::Admin,
        Role::User => pb::Role::User,
    }
}

fn role_from_proto(role: i32) -> Result<Role, BrokerError> {
    match pb::Role::try_from(role) {
        Ok(pb::Role::Admin) => Ok(Role::Admin),
        Ok(pb::Role::User) => Ok(Role::User),
        _ => Err(BrokerError::InvalidRequest(
            "a user's role must be admin or user".into(),
        )),
    }
}

fn permission_to_proto(p: Permission) -> pb::Permission {
    match p {
        Permission::Read => pb::Permission::Read,
        Permission::Write => pb::Permission::Write,
        Permission::Manage => pb::Permission::Manage,
    }
}

fn permission_from_proto(p: i32) -> Result<Permission, BrokerError> {
    match pb::Permission::try_from(p) {
        Ok(pb::Permission::Read) => Ok(Permission::Read),
        Ok(pb::Permission::Write) => Ok(Permission::Write),
        Ok(pb::Permission::Manage) => Ok(Permission::Manage),
        _ => Err(BrokerError::InvalidRequest(
            "a permission must be read, write or manage".into(),
        )),
    }
}

/// The verifiers a client derived, checked as `auth.json` would check them.
fn verifiers_from_proto(
    v: Option<&pb::PasswordVerifiers>,
) -> Result<PasswordVerifiers, BrokerError> {
    let v = v.ok_or_else(|| BrokerError::InvalidRequest("no password verifiers".into()))?;
    let key = |b: &[u8], what: &str| -> Result<[u8; 32], BrokerError> {
        b.try_into()
            .map_err(|_| BrokerError::InvalidRequest(format!("{what} must have 32 bytes")))
    };
    if !is_argon2id_phc(&v.argon2id) {
        return Err(BrokerError::InvalidRequest(
            "the password's Argon2id string is not valid".into(),
        ));
    }
    let scram = ScramVerifier {
        salt: v.scram_salt.clone(),
        iterations: v.scram_iterations,
        stored_key: key(&v.scram_stored_key, "the SCRAM stored key")?,
        server_key: key(&v.scram_server_key, "the SCRAM server key")?,
    };
    scram.validate().map_err(invalid)?;
    Ok(PasswordVerifiers {
        argon2id: v.argon2id.clone(),
        scram,
    })
}

/// What a client sends for a password: its verifiers, derived here so the password
/// never leaves the process.
pub fn password_verifiers(
    password: &Secret,
    iterations: u32,
) -> Result<pb::PasswordVerifiers, BrokerError> {
    let v = PasswordVerifiers::derive(password, iterations).map_err(invalid)?;
    Ok(pb::PasswordVerifiers {
        argon2id: v.argon2id,
        scram_salt: v.scram.salt,
        scram_iterations: v.scram.iterations,
        scram_stored_key: v.scram.stored_key.to_vec(),
        scram_server_key: v.scram.server_key.to_vec(),
    })
}
