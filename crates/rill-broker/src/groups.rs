//! Consumer groups in the broker: one [`Coordinator`] per (stream, topic, group), group
//! offsets in the offsets store, and the requests that drive them.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use rill_proto::pb::{
    CommitGroupOffsetRequest, DeleteGroupOffsetRequest, DescribeGroupResponse, GroupAssignment,
    GroupMemberInfo, GroupPartitionInfo, MemberMetric, PartitionOffset,
};

use crate::broker::Topic;
use crate::group::Coordinator;
use crate::names::validate_name;
use crate::offsets::OffsetKey;
use crate::{Broker, BrokerError, GroupError};

/// Session timeout of a group created without one.
pub(crate) const SESSION_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
const SESSION_TIMEOUT_MIN: Duration = Duration::from_secs(1);
const SESSION_TIMEOUT_MAX: Duration = Duration::from_secs(300);

pub(crate) type GroupKey = (String, String, String);

/// The groups of a broker.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    groups: Mutex<HashMap<GroupKey, Coordinator>>,
    /// On a cluster node: the metadata group's term in which it coordinates the groups
    /// it holds (`None`: it holds none). Groups of an earlier tenure are stale: between
    /// two, another node coordinated.
    term: Mutex<Option<u64>>,
    /// On a cluster node: held across each group request, commits included (their
    /// check and their commit in the metadata group), so commits are committed in the
    /// order ownership changed, as the single node's lock orders them in its log.
    pub(crate) order: tokio::sync::Mutex<()>,
}

impl Groups {
    // Coordinator methods validate before they change anything (a panic in one is a
    // bug that leaves the group as it was before the call), and every group rebuilds
    // from joins and heartbeats anyway: a lock without poisoning.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<GroupKey, Coordinator>> {
        self.groups.lock()
    }

    /// Removes members whose session expired, in every group.
    pub(crate) fn expire(&self, now: Instant) {
        for ((stream, topic, group), c) in self.lock().iter_mut() {
            for member in c.expire(now) {
                tracing::info!(
                    stream,
                    topic,
                    group,
                    member,
                    "group member's session expired"
                );
            }
        }
    }

    fn keys(&self) -> Vec<GroupKey> {
        self.lock().keys().cloned().collect()
    }

    /// The term whose groups this node holds (cluster nodes only).
    pub(crate) fn term(&self) -> Option<u64> {
        *self.term.lock()
    }

    /// Starts coordinating in `term`: every group of an earlier tenure is forgotten
    /// (its members get `NOT_MEMBER` and join again).
    pub(crate) fn start_term(&self, term: u64) {
        let mut groups = self.lock();
        groups.clear();
        *self.term.lock() = Some(term);
    }

    /// Forgets the groups of a deleted topic.
    pub(crate) fn forget_topic(&self, stream: &str, topic: &str) {
        self.lock()
            .retain(|(s, t, _), _| !(s == stream && t == topic));
    }

    /// The plain topic now has `partitions` partitions (an alter added some): every
    /// group of it assigns the new ones.
    pub(crate) fn grow_topic(&self, stream: &str, topic: &str, partitions: u32) {
        for ((s, t, group), c) in self.lock().iter_mut() {
            if s == stream && t == topic && c.set_assignable((0..partitions).collect()) {
                tracing::info!(
                    stream,
                    topic,
                    group,
                    partitions,
                    "group assigns added partitions"
                );
            }
        }
    }
}

/// Where a new group's generations start: the broker's clock in µs, so generations of
/// one group never repeat across broker restarts (as long as the clock does not go
/// back by more than the uptime).
fn generation_base() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
}

/// The prefix of a group's name in the stored offsets' keys. It cannot collide with a
/// named consumer: names have no ':'.
pub(crate) const GROUP_KEY_PREFIX: &str = "group:";

pub(crate) fn group_offset_key(
    stream: &str,
    topic: &str,
    group: &str,
    partition: u32,
) -> OffsetKey {
    OffsetKey {
        stream: stream.to_owned(),
        topic: topic.to_owned(),
        partition,
        consumer: format!("{GROUP_KEY_PREFIX}{group}"),
    }
}

impl Broker {
    /// What a group of `topic` assigns: every partition of a plain topic; of an elastic
    /// topic, the ranges that are ready and not finished for the group
    /// (docs/RANGES.md §6.3). Settled in id order (a range's parents have smaller ids): a
    /// range is finished if it is ready, sealed at `E`, and the group's stored offset
    /// is at or past `E` or nothing below `E` is left to read (never appended, or
    /// deleted by retention); an empty sealed range whose parents are unread is not
    /// finished, so its children wait for them too.
    pub(crate) fn group_assignable(&self, t: &Topic, key: &GroupKey) -> BTreeSet<u32> {
        let Some(map) = t.config.range_map() else {
            return (0..t.config.partitions).collect();
        };
        let (stream, topic, group) = key;
        let mut finished = BTreeSet::new();
        let mut assignable = BTreeSet::new();
        for r in map.ranges() {
            if !r.parents.iter().all(|p| finished.contains(p)) {
                continue;
            }
            let done = r.sealed.is_some_and(|end| {
                let stored = self
                    .stored_group_offset(&group_offset_key(stream, topic, group, r.id))
                    .unwrap_or(0);
                let start = t
                    .partitions
                    .get(r.id as usize)
                    .and_then(|p| p.log().ok())
                    .map_or(0, |log| log.log_start());
                stored.max(start) >= end
            });
            if done {
                finished.insert(r.id);
            } else {
                assignable.insert(r.id);
            }
        }
        assignable
    }

    /// Brings the set `c` assigns up to date (an elastic topic's ranges move on as the
    /// group finishes them; a plain topic's set changes only by an alter, which tells
    /// every group itself).
    fn refresh_assignable(&self, t: &Topic, key: &GroupKey, c: &mut Coordinator) {
        if t.config.ranges.is_none() {
            return;
        }
        let set = self.group_assignable(t, key);
        let before = c.generation();
        if c.set_assignable(set) {
            let (stream, topic, group) = key;
            tracing::info!(
                stream,
                topic,
                group,
                ranges = ?c.assignable(),
                from = before,
                generation = c.generation(),
                "group assigns the ranges ready for it"
            );
        }
    }

    /// An elastic topic's ranges changed (a split or a merge): its groups assign what is
    /// ready for them now (a parent sealed empty is finished at once).
    pub(crate) fn refresh_groups(&self, stream: &str, topic: &str) {
        let Ok(t) = self.topic(stream, topic) else {
            return;
        };
        let mut groups = self.groups.lock();
        for (key, c) in groups.iter_mut() {
            if key.0 == stream && key.1 == topic {
                self.refresh_assignable(&t, key, c);
            }
        }
    }

    /// Whether a group exists: it has a live member or a stored offset of one of the
    /// topic's partitions (a group whose members all left without storing anything is
    /// gone, as it is after a restart). `DescribeGroup`, `JoinGroup` without
    /// `create_group` and the admin `DeleteGroupOffset` agree on this.
    pub(crate) fn group_exists(
        &self,
        key: &GroupKey,
        c: Option<&Coordinator>,
        partitions: u32,
    ) -> bool {
        let (stream, topic, group) = key;
        c.is_some_and(|c| c.members().next().is_some())
            || (0..partitions).any(|p| {
                self.stored_group_offset(&group_offset_key(stream, topic, group, p))
                    .is_some()
            })
    }

    /// A group's stored offset: on a cluster node, as its mirror of the metadata has
    /// it (group requests wait for it to be current first, `cluster_coordinate`).
    pub(crate) fn stored_group_offset(&self, key: &OffsetKey) -> Option<u64> {
        if self.is_clustered() {
            return self.cluster_offset(&crate::data::offset_name(key.clone()));
        }
        self.offsets.get(key)
    }

    fn assignment(
        &self,
        t: Option<&Topic>,
        key: &GroupKey,
        c: &Coordinator,
        member: &str,
        timeout: Duration,
    ) -> Result<GroupAssignment, BrokerError> {
        let view = c.view(member)?;
        let (stream, topic, group) = key;
        // The owned ranges of an elastic topic that are sealed, with their ends: the
        // member stores `E` once it has handed out everything below it.
        let map = t.and_then(|t| t.config.range_map());
        let sealed = map
            .map(|map| {
                view.owned
                    .iter()
                    .filter_map(|&p| {
                        let end = map.get(p)?.sealed?;
                        Some(PartitionOffset {
                            partition: p,
                            offset: Some(end),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(GroupAssignment {
            sealed,
            member_id: member.to_owned(),
            generation: view.generation,
            offsets: view
                .owned
                .iter()
                .map(|&p| PartitionOffset {
                    partition: p,
                    offset: self.stored_group_offset(&group_offset_key(stream, topic, group, p)),
                })
                .collect(),
            owned: view.owned.into_iter().collect(),
            revoke: view.revoke.into_iter().collect(),
            session_timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
        })
    }

    /// Joins (creating the group if needed) and returns the member's assignment.
    pub fn join_group(
        &self,
        stream: &str,
        topic: &str,
        group: &str,
        member_id: &str,
        session_timeout: Option<Duration>,
    ) -> Result<GroupAssignment, BrokerError> {
        self.join(stream, topic, group, member_id, session_timeout, true)
    }

    /// Like [`Broker::join_group`], but a group that does not exist (no live member, no
    /// stored offset) is refused with [`BrokerError::GroupNotFound`] instead of created.
    pub fn join_existing_group(
        &self,
        stream: &str,
        topic: &str,
        group: &str,
        member_id: &str,
        session_timeout: Option<Duration>,
    ) -> Result<GroupAssignment, BrokerError> {
        self.join(stream, topic, group, member_id, session_timeout, false)
    }

    fn join(
        &self,
        stream: &str,
        topic: &str,
        group: &str,
        member_id: &str,
        session_timeout: Option<Duration>,
        create: bool,
    ) -> Result<GroupAssignment, BrokerError> {
        validate_name("group", group)?;
        let member = if member_id.is_empty() {
            format!("m-{:016x}", rand::random::<u64>())
        } else {
            validate_name("member", member_id)?;
            member_id.to_owned()
        };
        let t = self.topic(stream, topic)?;
        let partitions = t.config.partitions;
        let timeout = session_timeout
            .unwrap_or(SESSION_TIMEOUT_DEFAULT)
            .clamp(SESSION_TIMEOUT_MIN, SESSION_TIMEOUT_MAX);
        let key: GroupKey = (stream.to_owned(), topic.to_owned(), group.to_owned());
        let now = Instant::now();
        let mut groups = self.groups.lock();
        if let Some(c) = groups.get_mut(&key) {
            c.expire(now);
        }
        if !create && !self.group_exists(&key, groups.get(&key), partitions) {
            return Err(BrokerError::GroupNotFound(group.to_owned()));
        }
        let c = groups.entry(key.clone()).or_insert_with(|| {
            Coordinator::starting_at(self.group_assignable(&t, &key), timeout, generation_base())
        });
        self.refresh_assignable(&t, &key, c);
        c.join(&member, now);
        let timeout = c.session_timeout();
        tracing::info!(
            stream,
            topic,
            group,
            member,
            generation = c.generation(),
            "member joined"
        );
        self.assignment(Some(&t), &key, c, &member, timeout)
    }

    /// Records a heartbeat (and revocations done) and returns the member's assignment.
    pub fn group_heartbeat(
        &self,
        stream: &str,
        topic: &str,
        group: &str,
        member: &str,
        revoked: &[u32],
        metrics: &[MemberMetric],
    ) -> Result<GroupAssignment, BrokerError> {
        let report = member_report(metrics)?;
        let key: GroupKey = (stream.to_owned(), topic.to_owned(), group.to_owned());
        let now = Instant::now();
        // A deleted topic's groups are forgotten: its members get `NOT_MEMBER` below.
        let t = self.topic(stream, topic).ok();
        let mut groups = self.groups.lock();
        let c = groups
            .get_mut(&key)
            .ok_or_else(|| GroupError::NotMember(member.to_owned()))?;
        c.expire(now);
        c.heartbeat(member, now)?;
        if !revoked.is_empty() {
            c.revoked(member, revoked)?;
        }
        if let Some(report) = report {
            c.set_report(member, report)?;
        }
        // Ranges the group finished since (a member stored a seal) are revoked, their
        // children handed out.
        if let Some(t) = &t {
            self.refresh_assignable(t, &key, c);
        }
        let timeout = c.session_timeout();
        self.assignment(t.as_deref(), &key, c, member, timeout)
    }

    /// Leaves at once: the member's partitions move without waiting for a timeout.
    pub fn leave_group(
        &self,
        stream: &str,
        topic: &str,
        group: &str,
        member: &str,
    ) -> Result<(), BrokerError> {
        let key: GroupKey = (stream.to_owned(), topic.to_owned(), group.to_owned());
        let mut groups = self.groups.lock();
        let left = groups.get_mut(&key).is_some_and(|c| c.leave(member));
        if !left {
            return Err(GroupError::NotMember(member.to_owned()).into());
        }
        tracing::info!(stream, topic, group, member, "member left");
        Ok(())
    }

    /// Stores the group's next offset for a partition, if the member owns it now.
    pub async fn commit_group_offset(
        self: &Arc<Self>,
        request: &CommitGroupOffsetRequest,
    ) -> Result<(), BrokerError> {
        let CommitGroupOffsetRequest {
            stream,
            topic,
            group,
            member_id: member,
            generation,
            partition,
            offset,
        } = request;
        let (generation, partition, offset) = (*generation, *partition, *offset);
        let key: GroupKey = (stream.to_owned(), topic.to_owned(), group.to_owned());
        let offset_key = group_offset_key(stream, topic, group, partition);
        let member = member.to_owned();
        if self.is_clustered() {
            // Under `Groups::order` (taken by the request's dispatch with
            // `cluster_coordinate`): the check, then the commit, before any other group
            // request of this node moves the partition.
            {
                let groups = self.groups.lock();
                let c = groups
                    .get(&key)
                    .ok_or_else(|| GroupError::NotMember(member.clone()))?;
                c.check_commit(&member, generation, partition)?;
            }
            // Checked where this node leads the partition, as named consumers' are.
            if let Ok(p) = self.partition(stream, topic, partition)
                && p.replica().is_some_and(|r| r.leading().is_some())
            {
                self.check_storable(&offset_key, offset)?;
            }
            return self
                .cluster_store_offset_here(crate::data::offset_name(offset_key), offset)
                .await;
        }
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let pending = {
                // The ownership check and the append happen under the group lock, so
                // commits reach the log in the order ownership changed: a member that
                // lost a partition cannot store after its new owner.
                let groups = broker.groups.lock();
                let c = groups
                    .get(&key)
                    .ok_or_else(|| GroupError::NotMember(member.clone()))?;
                c.check_commit(&member, generation, partition)?;
                broker.check_storable(&offset_key, offset)?;
                broker.offsets.begin_store(offset_key, offset)?
            };
            broker.offsets.finish(pending)
        })
        .await
        .map_err(|e| BrokerError::Internal(format!("group commit task failed: {e}")))?
    }

    /// Deletes the group's stored offset of a partition; returns whether one was
    /// stored. With a member id it is fenced like a commit: the member must be in the
    /// group and own the partition now ([`GroupError::NotMember`],
    /// [`GroupError::NotAssigned`], [`GroupError::StaleGeneration`]). Without one it is
    /// an admin request, refused while the group has live members
    /// ([`BrokerError::GroupNotEmpty`]: they would store the offset again, Kafka's
    /// `DeleteConsumerGroupOffsets` refuses the same way) and for a group that does not
    /// exist ([`BrokerError::GroupNotFound`]).
    pub async fn delete_group_offset(
        self: &Arc<Self>,
        request: &DeleteGroupOffsetRequest,
    ) -> Result<bool, BrokerError> {
        self.check_running()?;
        let DeleteGroupOffsetRequest {
            stream,
            topic,
            group,
            member_id: member,
            generation,
            partition,
        } = request;
        let (generation, partition) = (*generation, *partition);
        validate_name("group", group)?;
        // The partition must exist (PARTITION_NOT_FOUND, TOPIC_NOT_FOUND otherwise).
        let partitions = self.topic(stream, topic)?.config.partitions;
        self.partition(stream, topic, partition)?;
        let key: GroupKey = (stream.to_owned(), topic.to_owned(), group.to_owned());
        let offset_key = group_offset_key(stream, topic, group, partition);
        let member = member.to_owned();
        if self.is_clustered() {
            // Checked, then committed, under `Groups::order`, as commits are.
            drop(self.check_group_delete(&key, &member, generation, partition, partitions)?);
            return self
                .cluster_delete_offset_here(crate::data::offset_name(offset_key))
                .await;
        }
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let pending = {
                // Checked and appended under the group lock, like commits, so a delete
                // and the owner's commits reach the log in the order they were allowed.
                let groups =
                    broker.check_group_delete(&key, &member, generation, partition, partitions)?;
                let pending = broker.offsets.begin_delete(offset_key)?;
                drop(groups);
                pending
            };
            let (pending, existed) = pending;
            broker.offsets.finish(pending)?;
            Ok(existed)
        })
        .await
        .map_err(|e| BrokerError::Internal(format!("group offset delete task failed: {e}")))?
    }

    /// Whether a group offset may be deleted (see [`Broker::delete_group_offset`]);
    /// returns the group lock, held, so the delete is ordered with commits.
    fn check_group_delete(
        &self,
        key: &GroupKey,
        member: &str,
        generation: u64,
        partition: u32,
        partitions: u32,
    ) -> Result<MutexGuard<'_, HashMap<GroupKey, Coordinator>>, BrokerError> {
        let mut groups = self.groups.lock();
        if member.is_empty() {
            if let Some(c) = groups.get_mut(key) {
                c.expire(Instant::now());
            }
            let c = groups.get(key);
            let members = c.map_or(0, |c| c.members().count());
            if members > 0 {
                return Err(BrokerError::GroupNotEmpty {
                    group: key.2.clone(),
                    members,
                    hint: "stop them first (or delete the offset as the member that owns the partition)",
                });
            }
            if !self.group_exists(key, c, partitions) {
                return Err(BrokerError::GroupNotFound(key.2.clone()));
            }
        } else {
            let c = groups
                .get(key)
                .ok_or_else(|| GroupError::NotMember(member.to_owned()))?;
            c.check_commit(member, generation, partition)?;
        }
        Ok(groups)
    }

    /// Lag of every live group: (stream, topic, group, partition, lag), for metrics.
    pub fn group_lags(&self) -> Vec<(String, String, String, u32, u64)> {
        let mut out = Vec::new();
        for (stream, topic, group) in self.groups.keys() {
            if let Ok(d) = self.describe_group(&stream, &topic, &group) {
                for p in d.partitions {
                    out.push((
                        stream.clone(),
                        topic.clone(),
                        group.clone(),
                        p.partition,
                        p.lag,
                    ));
                }
            }
        }
        out
    }

    /// Every live member's last report: (stream, topic, group, member, name, value).
    pub fn group_member_reports(&self) -> Vec<MemberReport> {
        let mut out = Vec::new();
        for (stream, topic, group) in self.groups.keys() {
            if let Ok(d) = self.describe_group(&stream, &topic, &group) {
                for m in d.members {
                    for x in m.metrics {
                        out.push(MemberReport {
                            stream: stream.clone(),
                            topic: topic.clone(),
                            group: group.clone(),
                            member: m.member_id.clone(),
                            name: x.name,
                            value: x.value,
                        });
                    }
                }
            }
        }
        out
    }

    /// Members, assignment, stored offsets and lag of a group. A group with stored
    /// offsets but no live member (after a restart) is described too.
    pub fn describe_group(
        &self,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<DescribeGroupResponse, BrokerError> {
        let (_, partitions) = self.describe_topic(stream, topic)?;
        let key: GroupKey = (stream.to_owned(), topic.to_owned(), group.to_owned());
        let groups = self.groups.lock();
        let c = groups.get(&key);
        let stored: Vec<Option<u64>> = partitions
            .iter()
            .map(|p| self.stored_group_offset(&group_offset_key(stream, topic, group, p.partition)))
            .collect();
        let count = u32::try_from(partitions.len()).unwrap_or(u32::MAX);
        if !self.group_exists(&key, c, count) {
            return Err(BrokerError::GroupNotFound(group.to_owned()));
        }
        let owners = c.map(Coordinator::owners).unwrap_or_default();
        Ok(DescribeGroupResponse {
            generation: c.map_or(0, Coordinator::generation),
            members: c
                .map(|c| {
                    c.members()
                        .filter_map(|m| {
                            let v = c.view(m).ok()?;
                            Some(GroupMemberInfo {
                                member_id: m.to_owned(),
                                owned: v.owned.into_iter().collect(),
                                revoke: v.revoke.into_iter().collect(),
                                metrics: c
                                    .report(m)
                                    .iter()
                                    .map(|(name, value)| MemberMetric {
                                        name: name.clone(),
                                        value: *value,
                                    })
                                    .collect(),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            partitions: partitions
                .iter()
                .zip(stored)
                .map(|(p, stored)| GroupPartitionInfo {
                    partition: p.partition,
                    stored_offset: stored,
                    log_end: p.next_offset,
                    lag: p.next_offset - stored.unwrap_or(p.first_offset).min(p.next_offset),
                    owner: owners.get(&p.partition).map(|m| (*m).to_owned()),
                })
                .collect(),
        })
    }
}

/// One client connection as the broker sees it: who it is (docs/SECURITY.md), its
/// half-done authentication exchange, and the consumer-group members that joined over
/// it, so a dropped connection removes them at once instead of after their session
/// timeout. Made by [`Broker::session`].
#[derive(Debug)]
pub struct Session {
    members: Mutex<BTreeSet<(String, String, String, String)>>,
    pub(crate) principal: parking_lot::RwLock<crate::auth::Principal>,
    pub(crate) exchange: Mutex<Option<crate::auth::Exchange>>,
    pub(crate) peer: Option<std::net::IpAddr>,
    /// Authenticated by a client certificate: an `Authenticate` may still replace it.
    pub(crate) by_certificate: bool,
}

impl Session {
    /// Who the connection is now.
    pub fn principal(&self) -> crate::auth::Principal {
        self.principal.read().clone()
    }
}

impl Broker {
    /// A new connection from `peer`: unauthenticated if the broker requires
    /// authentication, else anonymous.
    pub fn session(&self, peer: Option<std::net::IpAddr>) -> Session {
        Session {
            members: Mutex::default(),
            principal: parking_lot::RwLock::new(self.auth.initial()),
            exchange: Mutex::new(None),
            peer,
            by_certificate: false,
        }
    }

    /// A new TLS connection from `peer` whose client certificate's subject common name
    /// is `user` (docs/SECURITY.md §5): authenticated as that user if the broker
    /// requires authentication and the user exists, else as [`Broker::session`].
    pub fn session_with_certificate(&self, peer: Option<std::net::IpAddr>, user: &str) -> Session {
        let mut session = self.session(peer);
        if let Some(who) = self.auth.certificate_user(user) {
            tracing::info!(?peer, user = %who.user, "authenticated by a client certificate");
            *session.principal.get_mut() = crate::auth::Principal::User(who);
            session.by_certificate = true;
        }
        session
    }

    /// Checks an HTTP credential (docs/SECURITY.md §6) under the same failure limiter
    /// as `Authenticate`, and returns who it proves. A password costs an Argon2id hash:
    /// call it where blocking is allowed. Failures say nothing about the user.
    pub fn authenticate_http(
        &self,
        peer: Option<std::net::IpAddr>,
        credential: &crate::auth::HttpCredential,
    ) -> Result<crate::auth::Principal, BrokerError> {
        self.auth.authenticate_http(peer, credential)
    }

    /// Like [`Broker::handle`], as the session's principal, remembering group members
    /// joined through `session`; `Authenticate` steps the session's exchange.
    pub async fn handle_in(
        self: &Arc<Self>,
        session: &Session,
        request: rill_proto::Request,
    ) -> rill_proto::Response {
        use rill_proto::{RequestBody, Response, ResponseBody};
        let joined = match &request.body {
            RequestBody::JoinGroup(r) => Some((r.stream.clone(), r.topic.clone(), r.group.clone())),
            RequestBody::LeaveGroup(r) => {
                let key = (
                    r.stream.clone(),
                    r.topic.clone(),
                    r.group.clone(),
                    r.member_id.clone(),
                );
                session.members.lock().remove(&key);
                None
            }
            _ => None,
        };
        if let RequestBody::Authenticate(r) = &request.body {
            let kind = request.body.kind() as u16;
            return match self.auth.authenticate(
                &session.principal,
                &session.exchange,
                session.peer,
                session.by_certificate,
                r,
            ) {
                Ok(body) => Response::Ok {
                    body: ResponseBody::Authenticate(body),
                    payload: bytes::Bytes::new(),
                },
                Err(e) => Response::Err {
                    kind,
                    error: crate::handler::error_response(&e),
                },
            };
        }
        let principal = session.principal();
        let response = self.handle_as(&principal, request).await;
        if let (
            Some((stream, topic, group)),
            Response::Ok {
                body: ResponseBody::JoinGroup(j),
                ..
            },
        ) = (joined, &response)
            && let Some(a) = &j.assignment
        {
            session
                .members
                .lock()
                .insert((stream, topic, group, a.member_id.clone()));
        }
        response
    }

    /// The connection of `session` closed: its group members leave now.
    pub fn end_session(&self, session: &Session) {
        let members = std::mem::take(&mut *session.members.lock());
        for (stream, topic, group, member) in members {
            if self.leave_group(&stream, &topic, &group, &member).is_ok() {
                tracing::info!(
                    stream,
                    topic,
                    group,
                    member,
                    "member left with its connection"
                );
            }
        }
    }
}

/// One number a group member reported about itself ([`Broker::group_member_reports`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberReport {
    /// The group's stream.
    pub stream: String,
    /// The group's topic.
    pub topic: String,
    /// The group.
    pub group: String,
    /// The member's id.
    pub member: String,
    /// The number's name.
    pub name: String,
    /// Its value.
    pub value: u64,
}

/// Most numbers one member may report.
pub(crate) const MEMBER_METRICS_MAX: usize = 64;
/// Longest name of a reported number, in bytes.
pub(crate) const MEMBER_METRIC_NAME_MAX: usize = 64;

/// A heartbeat's report, checked and in name order: `None` if it reports nothing (the
/// last report stands). Too many numbers, a bad or repeated name: `INVALID_REQUEST`.
fn member_report(metrics: &[MemberMetric]) -> Result<Option<Vec<(String, u64)>>, BrokerError> {
    if metrics.is_empty() {
        return Ok(None);
    }
    if metrics.len() > MEMBER_METRICS_MAX {
        return Err(BrokerError::InvalidRequest(format!(
            "a heartbeat reports {} numbers; at most {MEMBER_METRICS_MAX}",
            metrics.len()
        )));
    }
    let mut report: Vec<(String, u64)> = Vec::with_capacity(metrics.len());
    for m in metrics {
        let ok = !m.name.is_empty()
            && m.name.len() <= MEMBER_METRIC_NAME_MAX
            && m.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(BrokerError::InvalidRequest(format!(
                "a reported number's name must be 1-{MEMBER_METRIC_NAME_MAX} bytes of [a-z0-9_]: {:?}",
                m.name
                    .chars()
                    .take(MEMBER_METRIC_NAME_MAX + 1)
                    .collect::<String>()
            )));
        }
        report.push((m.name.clone(), m.value));
    }
    report.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = report.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(BrokerError::InvalidRequest(format!(
            "a heartbeat reports {:?} twice",
            w[0].0
        )));
    }
    Ok(Some(report))
}
