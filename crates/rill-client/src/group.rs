//! Consumer groups: the broker assigns partitions to members and moves them as members
//! join, leave or go silent; see [`Topic::consumer_group`].
//!
//! A background task heartbeats, takes new partitions (starting where the group last
//! committed) and gives up revoked ones: it stores their offsets as the commit policy
//! says, drops their buffered records and reports them, so a partition moves only after
//! this member stopped reading it.
//!
//! Reading long-polls: [`GroupConsumer::next`] keeps at most one fetch in flight per
//! owned partition, each waiting on the broker up to `max_wait` for records, and wakes on
//! whichever answers first or when the assignment changes. A partition's next fetch
//! starts as soon as the answer before it is taken in, so it runs while the caller
//! handles those records; its answer waits, filed with the partition, until they are
//! all handed out. A partition so holds at most two answers (`max_bytes` each): the
//! records being handed out and the fetch ahead. The records of one answer are handed
//! out in poll results of `batch_length` (the unit of the commit policies), never
//! fetched twice. A fetch runs as a task of its own, tied to its partition: giving the
//! partition up aborts it, and an answer for a partition given up (or given up and
//! taken again) meanwhile is dropped unread, so a late answer never moves a position or
//! an offset.
//!
//! Over TCP to a server that serves push streaming (docs/STREAMING.md), each of those
//! reads takes the next pushed records of the partition's subscription instead of
//! fetching (waiting up to `max_wait` as well); the subscription is opened at the first
//! read, follows the partition's position, and ends when the partition is given up.
//! Where push is not served (embedded, an older server, a node that does not lead the
//! partition), the partition long-polls.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::Stream;
use rill_proto::pb::{
    CommitGroupOffsetRequest, DeleteGroupOffsetRequest, GroupAssignment, GroupHeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, MemberMetric,
};
use rill_proto::{RequestBody, ResponseBody};

use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinSet};

use crate::client::{Retry, unexpected};

/// Most numbers a group member may report about itself ([`GroupConsumer::report`]).
pub const MEMBER_METRICS_MAX: usize = 64;
/// Longest name of a number a group member reports, in bytes.
pub const MEMBER_METRIC_NAME_MAX: usize = 64;
use crate::commit::Committer;
use crate::subscription::read_pushed;
use crate::{
    ClientError, CommitPolicy, ErrorCode, Fetched, Position, Record, StartAt, Subscription, Topic,
};

/// Longest pause between two heartbeats of a member.
const HEARTBEAT_MAX: Duration = Duration::from_millis(250);

/// Called with the partitions a member gained or lost.
pub type RebalanceCallback = Arc<dyn Fn(&[u32]) + Send + Sync>;

/// Options of a group consumer; see [`Topic::consumer_group`].
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct GroupConsumerBuilder {
    topic: Topic,
    group: String,
    member_id: String,
    start_at: StartAt,
    allow_replay: bool,
    auto_join: bool,
    create_group: bool,
    commit_policy: CommitPolicy,
    batch_length: u32,
    poll_interval: Duration,
    max_wait: Duration,
    polling_retry_interval: Duration,
    session_timeout: Duration,
    max_bytes: u32,
    on_assigned: Option<RebalanceCallback>,
    on_revoked: Option<RebalanceCallback>,
    hold_revoked: bool,
}

impl std::fmt::Debug for GroupConsumerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConsumerBuilder")
            .field("group", &self.group)
            .field("start_at", &self.start_at)
            .field("commit_policy", &self.commit_policy)
            .finish_non_exhaustive()
    }
}

impl GroupConsumerBuilder {
    pub(crate) fn new(topic: Topic, group: &str) -> Self {
        Self {
            topic,
            group: group.to_owned(),
            member_id: String::new(),
            start_at: StartAt::First,
            allow_replay: false,
            auto_join: true,
            create_group: true,
            commit_policy: CommitPolicy::default(),
            batch_length: 1000,
            poll_interval: Duration::from_millis(100),
            max_wait: Duration::from_secs(1),
            polling_retry_interval: Duration::from_secs(1),
            session_timeout: Duration::from_secs(10),
            max_bytes: 1 << 20,
            on_assigned: None,
            on_revoked: None,
            hold_revoked: false,
        }
    }

    /// This member's id (default: the broker picks one).
    pub fn member_id(mut self, id: impl Into<String>) -> Self {
        self.member_id = id.into();
        self
    }

    /// Where a partition without a stored group offset starts (default `First`).
    pub fn start_at(mut self, start: StartAt) -> Self {
        self.start_at = start;
        self
    }

    /// Start every partition this member gets where `start_at` says, even one with a
    /// stored group offset (re-reading what the group consumed). Without it, `start_at`
    /// only applies to partitions without a stored offset.
    pub fn allow_replay(mut self) -> Self {
        self.allow_replay = true;
        self
    }

    /// Join the group in `build` (default on). Off: call [`GroupConsumer::join`] later.
    /// A group is created by its first join either way.
    pub fn auto_join(mut self, on: bool) -> Self {
        self.auto_join = on;
        self
    }

    /// Whether joining creates the group if it does not exist (default on). Off: the
    /// join fails with `GROUP_NOT_FOUND` ([`ClientError::code`]) unless the group exists
    /// — it has a live member or a stored offset — which catches a misspelt group name
    /// instead of starting a new group at `start_at`. Applies to the first join only: a
    /// member whose session expired rejoins the group it was in even if that emptied
    /// meanwhile. An older server ignores it and creates the group.
    pub fn create_group(mut self, on: bool) -> Self {
        self.create_group = on;
        self
    }

    /// When offsets are stored (default [`CommitPolicy::Polling`]).
    pub fn commit_policy(mut self, policy: CommitPolicy) -> Self {
        self.commit_policy = policy;
        self
    }

    /// Most records handed out per poll of a partition (default 1000).
    pub fn batch_length(mut self, n: u32) -> Self {
        self.batch_length = n;
        self
    }

    /// Pause between polls of a partition that found nothing, when long polling is off
    /// (`max_wait` zero; default 100 ms). With long polling, a partition is polled again
    /// at once after its wait ended empty, but never sooner than `min(max_wait,
    /// poll_interval)` after the previous poll started.
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// Bytes per fetch of a partition (default 1 MiB; at least one whole batch is
    /// always fetched). A member holds up to two answers per owned partition: the
    /// records it hands out and the fetch it makes ahead meanwhile.
    pub fn max_bytes(mut self, n: u32) -> Self {
        self.max_bytes = n;
        self
    }

    /// How long each fetch waits on the broker for records (default 1 s; the broker
    /// caps it at 60 s). The member keeps one such fetch in flight per owned partition,
    /// so a record reaches it as soon as it is appended and an idle member sends about
    /// one fetch per partition per `max_wait`. Zero turns long polling off: fetches
    /// answer at once and an empty one is followed by a `poll_interval` pause.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.max_wait = d;
        self
    }

    /// Pause before polling a partition again after a poll of it failed (default 1 s;
    /// must be positive). The failure is returned by [`GroupConsumer::next`] (after the
    /// client's own retries of transient errors); the next call polls that partition
    /// again only once the pause is over, so a caller that goes on after errors does
    /// not hammer the broker. Other partitions are read meanwhile.
    pub fn polling_retry_interval(mut self, d: Duration) -> Self {
        self.polling_retry_interval = d;
        self
    }

    /// How long the member may be silent before the broker removes it (default 10 s;
    /// set by the first member of the group).
    pub fn session_timeout(mut self, d: Duration) -> Self {
        self.session_timeout = d;
        self
    }

    /// Called with the partitions this member gains, before any of their records.
    pub fn on_assigned(mut self, f: impl Fn(&[u32]) + Send + Sync + 'static) -> Self {
        self.on_assigned = Some(Arc::new(f));
        self
    }

    /// Called with the partitions this member loses, after their offsets were stored.
    pub fn on_revoked(mut self, f: impl Fn(&[u32]) + Send + Sync + 'static) -> Self {
        self.on_revoked = Some(Arc::new(f));
        self
    }

    /// Holds partitions the broker revokes until [`GroupConsumer::release`] gives them
    /// back (default off: at once). Until then the broker moves them to no one else and
    /// this member may still store their offsets, so a caller that processes records
    /// outside [`GroupConsumer::next`] can finish what it holds and store it first.
    pub fn hold_revoked(mut self, on: bool) -> Self {
        self.hold_revoked = on;
        self
    }

    /// Joins the group (creating it if needed, unless `create_group(false)`) and starts
    /// heartbeating, unless `auto_join(false)`.
    pub async fn build(self) -> Result<GroupConsumer, ClientError> {
        if self.max_bytes == 0 {
            return Err(ClientError::InvalidArgument(
                "max_bytes must be positive".into(),
            ));
        }
        if self.batch_length == 0
            || self.poll_interval.is_zero()
            || self.session_timeout.is_zero()
            || self.polling_retry_interval.is_zero()
        {
            return Err(ClientError::InvalidArgument(
                "batch_length, poll_interval, polling_retry_interval and session_timeout must be positive".into(),
            ));
        }
        self.commit_policy.validate()?;
        if matches!(self.start_at, StartAt::Offset(_))
            && crate::reader::is_elastic(&self.topic).await
        {
            return Err(ClientError::InvalidArgument(format!(
                "{}/{} is an elastic topic: an offset names a place in one range, not in the topic; start a group of it at First, Last, End, Next or a time",
                self.topic.stream, self.topic.name
            )));
        }
        let inner = Arc::new(Inner {
            topic: self.topic,
            group: self.group,
            start_at: self.start_at,
            allow_replay: self.allow_replay,
            create_group: self.create_group,
            policy: self.commit_policy,
            batch_length: self.batch_length as usize,
            poll_interval: self.poll_interval,
            max_wait: self.max_wait,
            retry_interval: self.polling_retry_interval,
            max_bytes: self.max_bytes,
            runtime: tokio::runtime::Handle::current(),
            on_assigned: self.on_assigned,
            on_revoked: self.on_revoked,
            hold_revoked: self.hold_revoked,
            member_id: parking_lot::Mutex::new(self.member_id),
            report: parking_lot::Mutex::new(Vec::new()),
            state: Mutex::new(State {
                generation: 0,
                partitions: BTreeMap::new(),
                revoked: Vec::new(),
                held: Vec::new(),
                pending: None,
                next: 0,
                closed: false,
            }),
            wake: Notify::new(),
            assigned: Notify::new(),
            session_timeout: parking_lot::Mutex::new(self.session_timeout),
            ends: parking_lot::Mutex::new(None),
        });
        let mut consumer = GroupConsumer {
            inner,
            heartbeat: None,
            fetches: JoinSet::new(),
        };
        if self.auto_join {
            consumer.join().await?;
        }
        Ok(consumer)
    }
}

#[derive(Debug)]
struct Partition {
    /// Where the next fetch starts: after the last record fetched.
    fetch_at: u64,
    committer: Committer,
    /// Records fetched and not handed out yet, in order: at most one fetch's answer.
    /// The first `poll_left` of them are the current poll result (`batch_length`
    /// records at most); the rest make the poll results after it, so a fetch that
    /// brings more than `batch_length` records is never fetched again.
    buffered: VecDeque<Record>,
    /// Records of the current poll result not handed out yet.
    poll_left: usize,
    /// The start of an open-ended loss already reported.
    reported: Option<u64>,
    /// The fetch in flight, at most one. Dropping the partition (given up) aborts it.
    fetch: Option<InFlight>,
    /// The answer of a fetch made ahead, arrived while records were still buffered:
    /// taken in once they are handed out, so an answer (records, a loss, an error)
    /// always meets an empty buffer. Together with `buffered` at most two answers.
    ready: Option<FetchDone>,
    /// No fetch before this (after an empty answer or a failure).
    not_before: Option<Instant>,
    /// The push subscription the partition is read through (docs/STREAMING.md §7):
    /// held here between reads, moved into each read's task and handed back with its
    /// answer; dropped with the partition (or an aborted task), which unsubscribes.
    sub: Option<Subscription>,
    /// Whether to read by push: cleared for good once the transport, the server or
    /// the node says it does not serve it (the partition then long-polls).
    push: bool,
    /// A sealed range of an elastic topic: the offset it is sealed at, as the broker
    /// said with the assignment. Nothing is fetched at or past it; once everything
    /// below it is handed out, the member stores it (docs/RANGES.md §6.3).
    end: Option<u64>,
    /// The broker refused the store of `end` (the range moved meanwhile): not sent again
    /// for this taking of the range. A store cancelled or failed otherwise is sent again.
    finishing: bool,
}

impl Partition {
    fn new(fetch_at: u64, committer: Committer, push: bool) -> Self {
        Self {
            fetch_at,
            committer,
            buffered: VecDeque::new(),
            poll_left: 0,
            reported: None,
            fetch: None,
            ready: None,
            not_before: None,
            sub: None,
            push,
            end: None,
            finishing: false,
        }
    }

    /// Whether every record below the range's seal is fetched and handed out, so the
    /// range can be finished: the member stores its seal (once). Under
    /// [`CommitPolicy::Disabled`] only once the caller has committed every record it was
    /// handed (the records below the seal it was not handed are none, or lost).
    fn finish_due(&self, p: u32, pending: Option<u32>, policy: CommitPolicy) -> Option<u64> {
        let end = self.end.filter(|&e| e > 0)?;
        let drained = self.fetch_at >= end
            && self.buffered.is_empty()
            && self.ready.is_none()
            && pending != Some(p);
        let stored = self.committer.last_stored();
        let committed = policy != CommitPolicy::Disabled
            || self
                .committer
                .last_handed()
                .is_none_or(|h| stored.is_some_and(|s| s >= h));
        (drained && committed && !self.finishing && stored.is_none_or(|s| s + 1 < end))
            .then_some(end - 1)
    }

    /// Whether a fetch should start now: none in flight or waiting to be taken in, no
    /// pause pending. Records may still be buffered: the fetch runs ahead of the caller,
    /// so the wire and the caller's handling overlap.
    fn fetch_due(&self, now: Instant) -> bool {
        self.fetch.is_none()
            && self.ready.is_none()
            && self.not_before.is_none_or(|t| t <= now)
            && self.end.is_none_or(|e| self.fetch_at < e)
    }

    /// Starts the next poll result: up to `batch_length` of the buffered records.
    fn start_poll(&mut self, batch_length: usize) {
        self.poll_left = batch_length.min(self.buffered.len());
        self.committer.polled(self.poll_left);
    }
}

/// A fetch task of one partition; aborted when dropped, so a partition given up stops
/// waiting on the broker at once.
#[derive(Debug)]
struct InFlight(AbortHandle);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a read task returns.
#[derive(Debug)]
struct FetchDone {
    partition: u32,
    /// The position read from.
    position: u64,
    started: Instant,
    answer: Result<Fetched, ClientError>,
    /// The subscription read through, handed back to the partition.
    sub: Option<Subscription>,
    /// Read by push: an empty answer is a `max_wait` that passed, no pause follows.
    pushed: bool,
    /// Push is not served for the partition here: long-poll from now on.
    unserved: bool,
}

#[derive(Debug)]
struct State {
    generation: u64,
    partitions: BTreeMap<u32, Partition>,
    /// Partitions given up since the last heartbeat, to report.
    revoked: Vec<u32>,
    /// Revoked partitions held until released (`hold_revoked`).
    held: Vec<u32>,
    /// The partition of the record handed out last, while the caller may still be
    /// handling it (see [`CommitPolicy`]).
    pending: Option<u32>,
    /// Round-robin cursor over owned partitions.
    next: usize,
    closed: bool,
}

impl State {
    /// The caller is done with the record handed out last; returns the partition and
    /// offset to store, if its policy says so now.
    fn done(&mut self, now: Instant) -> Option<(u32, u64)> {
        let p = self.pending.take()?;
        let part = self.partitions.get_mut(&p)?;
        part.committer.done(now).map(|consumed| (p, consumed))
    }

    /// The partition to hand a record out of next: round-robin over those with records
    /// buffered.
    fn next_buffered(&self) -> Option<u32> {
        let keys: Vec<u32> = self.partitions.keys().copied().collect();
        let start = self.next;
        (0..keys.len())
            .map(|i| keys[(start + i) % keys.len()])
            .find(|p| !self.partitions[p].buffered.is_empty())
    }

    /// The partition to hand a record out of next without starting a poll result:
    /// round-robin over those with one under way.
    fn next_in_poll(&self) -> Option<u32> {
        let keys: Vec<u32> = self.partitions.keys().copied().collect();
        let start = self.next;
        (0..keys.len())
            .map(|i| keys[(start + i) % keys.len()])
            .find(|p| self.partitions[p].poll_left > 0)
    }

    /// Hands out the next record of `p`, whose poll result has one left.
    fn hand_out(&mut self, p: u32) -> Record {
        self.next = self.next.wrapping_add(1);
        self.pending = Some(p);
        let part = self.partitions.get_mut(&p).expect("owned");
        let record = part
            .buffered
            .pop_front()
            .expect("a record of the poll result");
        part.poll_left -= 1;
        part.committer.handed_out(record.offset);
        record
    }

    /// Like [`State::done`], without storing (the caller stores explicitly).
    fn finish_pending(&mut self) {
        if let Some(p) = self.pending.take()
            && let Some(part) = self.partitions.get_mut(&p)
        {
            part.committer.finish_pending();
        }
    }
}

/// What one look at the partitions ([`GroupConsumer::step`]) found to do.
enum Step {
    /// Shut down.
    Closed,
    /// A record to hand out.
    Record(Record),
    /// A store a commit policy asks for at the start of a poll result, before its first
    /// record is handed out.
    Store(u32, u64),
    /// A sealed range handed out to its seal: store the seal (the record before it as
    /// consumed), which finishes the range for the group, then heartbeat to learn of
    /// its children.
    Finish(u32, u64),
    /// A fetch answered with an error, taken in (the partition moved past a loss, or
    /// pauses before fetching again).
    Failed(ClientError),
    /// Nothing to hand out: make these stores, then wait for a fetch, new partitions or
    /// the end of the earliest pause.
    Wait {
        stores: Vec<(u32, u64)>,
        pause_end: Option<Instant>,
    },
}

/// Files a finished fetch with its partition, to be taken in once the partition's
/// buffered records are handed out. An answer for a partition given up meanwhile (or
/// given up and taken again, which starts a fetch of its own) is not the partition's to
/// use and is dropped unread.
fn file(st: &mut State, done: Result<(tokio::task::Id, FetchDone), tokio::task::JoinError>) {
    let (id, done) = match done {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Aborted: its partition was given up.
        Err(_) => return,
    };
    if let Some(part) = st
        .partitions
        .get_mut(&done.partition)
        .filter(|part| part.fetch.as_ref().is_some_and(|f| f.0.id() == id))
    {
        let mut done = done;
        part.fetch = None;
        part.sub = done.sub.take();
        if done.unserved {
            part.push = false;
        }
        part.ready = Some(done);
    }
}

/// Takes in the answers of partitions whose buffered records are all handed out (those
/// with an error only if `errors`); returns the first error taken in, to hand to the
/// caller.
fn take_ready(inner: &Inner, st: &mut State, now: Instant, errors: bool) -> Option<ClientError> {
    for part in st.partitions.values_mut() {
        if !part.buffered.is_empty()
            || part
                .ready
                .as_ref()
                .is_none_or(|done| done.answer.is_err() && !errors)
        {
            continue;
        }
        let FetchDone {
            position,
            started,
            answer,
            pushed,
            ..
        } = part.ready.take().expect("checked above");
        if part.fetch_at != position {
            continue;
        }
        let fetched = match answer {
            Ok(f) => f,
            Err(ClientError::Server {
                code: ErrorCode::OffsetBeforeStart,
                offset: Some(start),
                ..
            }) => {
                part.fetch_at = start;
                continue;
            }
            Err(e) => {
                let Some((_, from, to)) = e.lost_range() else {
                    part.not_before = Some(now + inner.retry_interval);
                    return Some(e);
                };
                match to {
                    Some(to) => {
                        // Nothing is buffered: the position moves past the range.
                        part.fetch_at = to.max(position);
                        if let Some(last) = to.checked_sub(1) {
                            part.committer.skipped(last);
                        }
                        part.reported = None;
                    }
                    // Told already: look again after a pause.
                    None if part.reported == Some(from) => {
                        part.not_before = Some(now + inner.poll_interval);
                        continue;
                    }
                    None => {
                        part.reported = Some(from);
                        part.not_before = Some(now + inner.poll_interval);
                    }
                }
                return Some(e);
            }
        };
        part.buffered = fetched.records.into();
        part.fetch_at = part
            .buffered
            .back()
            .map_or(fetched.next_offset.max(position), |r| r.offset + 1);
        if part.buffered.is_empty() && !pushed {
            part.not_before = Some(started + inner.idle_pause());
        }
    }
    None
}

/// Starts a fetch on every owned partition that is due one; returns the earliest end of
/// a pause among the others, if any.
fn start_fetches(
    inner: &Inner,
    st: &mut State,
    fetches: &mut JoinSet<FetchDone>,
    now: Instant,
) -> Option<Instant> {
    let mut pause_end: Option<Instant> = None;
    for (&p, part) in st.partitions.iter_mut() {
        if !part.fetch_due(now) {
            if part.fetch.is_none()
                && part.ready.is_none()
                && let Some(t) = part.not_before
            {
                pause_end = Some(pause_end.map_or(t, |e| e.min(t)));
            }
            continue;
        }
        part.not_before = None;
        let topic = inner.topic.clone();
        let (position, max_bytes, max_wait) = (part.fetch_at, inner.max_bytes, inner.max_wait);
        let (push, mut sub) = (part.push, part.sub.take());
        // On the member's runtime: `try_next` may run on a thread outside it.
        let task = fetches.spawn_on(
            async move {
                let started = Instant::now();
                let from = Position::new(p, position);
                // Two fetches' worth in flight when pushed: the server reads ahead while
                // the caller handles records, as the fetch ahead does.
                let window = max_bytes.saturating_mul(2);
                let pushed = if push {
                    read_pushed(&topic, &mut sub, from, window, max_wait).await
                } else {
                    None
                };
                let (answer, pushed, unserved) = match pushed {
                    Some(answer) => (answer, true, false),
                    None => (topic.fetch(from, max_bytes, max_wait).await, false, push),
                };
                FetchDone {
                    partition: p,
                    position,
                    started,
                    answer,
                    sub,
                    pushed,
                    unserved,
                }
            },
            &inner.runtime,
        );
        part.fetch = Some(InFlight(task));
    }
    pause_end
}

struct Inner {
    topic: Topic,
    group: String,
    start_at: StartAt,
    allow_replay: bool,
    create_group: bool,
    policy: CommitPolicy,
    batch_length: usize,
    poll_interval: Duration,
    max_wait: Duration,
    retry_interval: Duration,
    max_bytes: u32,
    /// The runtime the member was built on, where its fetches run.
    runtime: tokio::runtime::Handle,
    on_assigned: Option<RebalanceCallback>,
    on_revoked: Option<RebalanceCallback>,
    hold_revoked: bool,
    /// The member id the broker knows this member by. A non-poisoning lock, like
    /// `session_timeout` and `report`: each is one value, set whole.
    member_id: parking_lot::Mutex<String>,
    /// What the member reports about itself with each heartbeat (checked when set).
    report: parking_lot::Mutex<Vec<(String, u64)>>,
    /// A poisoning lock on purpose: a panic half-way through taking or giving up
    /// partitions, or through handing out a record, can leave buffers, positions and
    /// commit state disagreeing, and acting on them could skip records or store offsets
    /// of records never handed out. After a panic the member fails its calls with
    /// [`ClientError::Poisoned`] and stops heartbeating (its partitions move to the other
    /// members when its session expires).
    state: Mutex<State>,
    /// Wakes the heartbeat task early (revocations to report, shutdown).
    wake: Notify,
    /// Wakes a waiting `next` when partitions were taken up, to start fetching them.
    assigned: Notify,
    session_timeout: parking_lot::Mutex<Duration>,
    /// With [`StartAt::End`] on an elastic topic: where each range ended when the
    /// member joined (a range not in it was made since, and starts at its first
    /// record).
    ends: parking_lot::Mutex<Option<BTreeMap<u32, u64>>>,
}

impl Inner {
    fn lock(&self) -> Result<MutexGuard<'_, State>, ClientError> {
        self.state.lock().map_err(|_| ClientError::Poisoned {
            what: "the group member's partitions and positions",
        })
    }

    fn member_id(&self) -> String {
        self.member_id.lock().clone()
    }

    async fn call(&self, body: RequestBody) -> Result<ResponseBody, ClientError> {
        Ok(self
            .topic
            .client
            .call(body, Bytes::new(), Retry::Safe)
            .await?
            .0)
    }

    /// Joins; `first` is the member's first join (where `create_group` applies), not a
    /// rejoin after its session expired.
    async fn join(&self, first: bool) -> Result<GroupAssignment, ClientError> {
        let member_id = self.member_id();
        let timeout = *self.session_timeout.lock();
        match self
            .call(RequestBody::JoinGroup(JoinGroupRequest {
                stream: self.topic.stream.to_string(),
                topic: self.topic.name.to_string(),
                group: self.group.clone(),
                member_id,
                session_timeout_ms: Some(u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX)),
                // Absent means "create", as for servers that predate the field.
                create_group: (first && !self.create_group).then_some(false),
            }))
            .await?
        {
            ResponseBody::JoinGroup(r) => r
                .assignment
                .ok_or_else(|| ClientError::Protocol("join answered without an assignment".into())),
            other => Err(unexpected(&other)),
        }
    }

    /// Takes the partitions newly owned and gives up those to revoke.
    async fn apply(&self, a: GroupAssignment) -> Result<(), ClientError> {
        *self.session_timeout.lock() =
            Duration::from_millis(u64::from(a.session_timeout_ms.max(1)));
        // Revocations first: store what the policy says, then let go.
        let mut stores = Vec::new();
        let (gained, lost) = {
            let mut st = self.lock()?;
            *self.member_id.lock() = a.member_id.clone();
            st.generation = a.generation;
            let mut lost = Vec::new();
            for p in &a.revoke {
                if let Some(mut part) = st.partitions.remove(p) {
                    // Only what the caller is done with: a record it may still be
                    // handling goes to the next owner again.
                    if let Some(consumed) = part.committer.revoke(Instant::now()) {
                        stores.push((*p, consumed + 1));
                    }
                    lost.push(*p);
                } else if !st.revoked.contains(p) && !st.held.contains(p) {
                    // Owned on paper but never taken up here (it was already being
                    // revoked when we got it): nothing to stop, but the broker waits for
                    // the word.
                    st.revoked.push(*p);
                    self.wake.notify_one();
                }
            }
            // Partitions that vanished from `owned` (an expiry elsewhere) are dropped too.
            let owned: Vec<u32> = st.partitions.keys().copied().collect();
            for p in owned {
                if !a.owned.contains(&p) {
                    st.partitions.remove(&p);
                    lost.push(p);
                }
            }
            let gained: Vec<u32> = a
                .owned
                .iter()
                .copied()
                .filter(|p| !st.partitions.contains_key(p) && !a.revoke.contains(p))
                .collect();
            (gained, lost)
        };
        for (p, next) in stores {
            // A refused store (we no longer own it after all) is reported, not fatal.
            if let Err(e) = self.commit_next(p, next).await {
                tracing::warn!(group = %self.group, partition = p, error = %e, "storing a revoked partition's offset failed");
            }
        }
        if !lost.is_empty() {
            if self.hold_revoked {
                self.lock()?.held.extend(&lost);
            } else {
                self.lock()?.revoked.extend(&lost);
                self.wake.notify_one();
            }
            if let Some(f) = &self.on_revoked {
                f(&lost);
            }
        }
        let mut started = Vec::new();
        for p in gained {
            let stored = a
                .offsets
                .iter()
                .find(|o| o.partition == p)
                .and_then(|o| o.offset);
            let joined_end = self.ends.lock().as_ref().map(|ends| ends.get(&p).copied());
            let position = match (self.start_at, stored, joined_end) {
                (StartAt::Next, Some(next), _) => next,
                (_, Some(next), _) if !self.allow_replay => next,
                (StartAt::End, _, Some(Some(end))) => end,
                (StartAt::End, _, Some(None)) => self.topic.offset_for(p, StartAt::First).await?,
                (start, _, _) => self.topic.offset_for(p, start).await?,
            };
            started.push((p, position, stored.and_then(|n| n.checked_sub(1))));
        }
        // Seals of owned ranges (an elastic topic): a range sealed meanwhile is read to
        // its seal and finished.
        let mut sealed_now = false;
        {
            let mut st = self.lock()?;
            for (p, position, consumed) in &started {
                st.partitions.insert(
                    *p,
                    Partition::new(
                        *position,
                        Committer::new(self.policy, *consumed, Instant::now()),
                        true,
                    ),
                );
            }
            for o in &a.sealed {
                if let (Some(part), Some(end)) = (st.partitions.get_mut(&o.partition), o.offset)
                    && part.end != Some(end)
                {
                    part.end = Some(end);
                    sealed_now = true;
                }
            }
        }
        // A waiting `next` starts reading what was taken, or finishes what was sealed.
        if sealed_now || !started.is_empty() {
            self.assigned.notify_one();
        }
        if !started.is_empty()
            && let Some(f) = &self.on_assigned
        {
            let ps: Vec<u32> = started.iter().map(|s| s.0).collect();
            f(&ps);
        }
        Ok(())
    }

    /// The least time between the starts of two polls of a partition that found
    /// nothing: `poll_interval` without long polling; with it, `min(max_wait,
    /// poll_interval)`, which only matters if the broker answered before `max_wait`.
    fn idle_pause(&self) -> Duration {
        if self.max_wait.is_zero() {
            self.poll_interval
        } else {
            self.max_wait.min(self.poll_interval)
        }
    }

    async fn commit_next(&self, partition: u32, next: u64) -> Result<(), ClientError> {
        let member_id = self.member_id();
        let generation = self.lock()?.generation;
        self.call(RequestBody::CommitGroupOffset(CommitGroupOffsetRequest {
            stream: self.topic.stream.to_string(),
            topic: self.topic.name.to_string(),
            group: self.group.clone(),
            member_id,
            generation,
            partition,
            offset: next,
        }))
        .await
        .map(drop)
    }

    /// Heartbeats every 250 ms (or a third of the session timeout, if shorter), or when
    /// woken, until closed. Heartbeats are how a member learns of a rebalance, so their
    /// period bounds how long a moved partition waits for its new owner.
    async fn heartbeat_loop(self: Arc<Self>) {
        loop {
            let session = *self.session_timeout.lock();
            let every = (session / 3).clamp(Duration::from_millis(50), HEARTBEAT_MAX);
            let _ = tokio::time::timeout(every, self.wake.notified()).await;
            let (revoked, closed) = match self.lock() {
                Ok(mut st) => (std::mem::take(&mut st.revoked), st.closed),
                Err(e) => {
                    tracing::error!(group = %self.group, error = %e, "stopping the heartbeat");
                    return;
                }
            };
            if closed {
                return;
            }
            let member_id = self.member_id();
            let metrics: Vec<MemberMetric> = self
                .report
                .lock()
                .iter()
                .map(|(name, value)| MemberMetric {
                    name: name.clone(),
                    value: *value,
                })
                .collect();
            let beat = self
                .call(RequestBody::GroupHeartbeat(GroupHeartbeatRequest {
                    stream: self.topic.stream.to_string(),
                    topic: self.topic.name.to_string(),
                    group: self.group.clone(),
                    member_id,
                    revoked: revoked.clone(),
                    metrics,
                }))
                .await;
            let assignment = match beat {
                Ok(ResponseBody::GroupHeartbeat(r)) => r.assignment,
                Ok(other) => {
                    tracing::warn!(error = %unexpected(&other), "bad heartbeat answer");
                    None
                }
                Err(e) if e.code() == Some(ErrorCode::NotMember) => {
                    // Our session expired: everything we had is someone else's now.
                    tracing::warn!(group = %self.group, "session expired; rejoining");
                    let lost: Vec<u32> = match self.lock() {
                        Ok(mut st) => {
                            let lost = st.partitions.keys().copied().collect();
                            st.partitions.clear();
                            // No longer ours to give back.
                            st.held.clear();
                            lost
                        }
                        Err(_) => return,
                    };
                    if !lost.is_empty()
                        && let Some(f) = &self.on_revoked
                    {
                        f(&lost);
                    }
                    self.join(false).await.ok()
                }
                // Nothing can be sent any more; the member's session ends with the
                // connection (or the embedded broker).
                Err(ClientError::Closed) => return,
                Err(e) => {
                    // Report the revocations again next time.
                    if let Ok(mut st) = self.lock() {
                        st.revoked.extend(revoked);
                    }
                    tracing::warn!(group = %self.group, error = %e, "heartbeat failed");
                    None
                }
            };
            if let Some(a) = assignment
                && let Err(e) = self.apply(a).await
            {
                tracing::warn!(group = %self.group, error = %e, "applying an assignment failed");
            }
        }
    }
}

/// A member of a consumer group; see [`Topic::consumer_group`].
///
/// [`GroupConsumer::next`] long-polls: each owned partition has at most one fetch
/// waiting on the broker (up to [`GroupConsumerBuilder::max_wait`]), so a new record
/// arrives within milliseconds and an idle member sends about one request per partition
/// per `max_wait`. Rebalances are handled by a background task and never wait for a
/// fetch: a partition given up has its fetch dropped, answer and all.
pub struct GroupConsumer {
    inner: Arc<Inner>,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    /// The fetches in flight, at most one per owned partition (each is also held by its
    /// partition, as an [`InFlight`]); aborted when the consumer is dropped.
    fetches: JoinSet<FetchDone>,
}

impl std::fmt::Debug for GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("GroupConsumer");
        d.field("group", &self.inner.group)
            .field("member_id", &self.inner.member_id());
        match self.inner.lock() {
            Ok(st) => d
                .field("generation", &st.generation)
                .field("partitions", &st.partitions.keys().collect::<Vec<_>>()),
            Err(_) => d.field("state", &"poisoned"),
        }
        .finish()
    }
}

impl GroupConsumer {
    /// Joins the group (creating it at the first join, unless `create_group(false)`)
    /// and starts heartbeating; done by `build` unless `auto_join(false)`. Joining again
    /// is a no-op.
    pub async fn join(&mut self) -> Result<(), ClientError> {
        if self.heartbeat.is_some() {
            return Ok(());
        }
        if self.inner.start_at == StartAt::End {
            // An elastic topic's ranges come to a member one generation of the
            // lineage at a time, long after it joined: "the end" is where each range
            // stands now, and a range made later starts at its first record.
            let d = self.inner.topic.describe().await?;
            if d.elastic {
                *self.inner.ends.lock() = Some(
                    d.partitions
                        .iter()
                        .map(|p| (p.partition, p.next_offset))
                        .collect(),
                );
            }
        }
        let assignment = self.inner.join(true).await?;
        self.inner.apply(assignment).await?;
        self.heartbeat = Some(tokio::spawn(Arc::clone(&self.inner).heartbeat_loop()));
        Ok(())
    }

    /// This member's id.
    pub fn member_id(&self) -> String {
        self.inner.member_id()
    }

    /// Numbers this member reports about itself, sent with each heartbeat from now on
    /// (replacing the last ones) and shown by `rill group describe` and the server's
    /// `/metrics` (`rill_group_member_metric`). At most [`MEMBER_METRICS_MAX`], each
    /// named by 1 to [`MEMBER_METRIC_NAME_MAX`] bytes of `[a-z0-9_]`, no name twice;
    /// anything else is [`ClientError::InvalidArgument`] and changes nothing. An empty
    /// report sends nothing: the broker keeps showing the last one.
    pub fn report<N: Into<String>>(
        &self,
        metrics: impl IntoIterator<Item = (N, u64)>,
    ) -> Result<(), ClientError> {
        let mut report: Vec<(String, u64)> =
            metrics.into_iter().map(|(n, v)| (n.into(), v)).collect();
        if report.len() > MEMBER_METRICS_MAX {
            return Err(ClientError::InvalidArgument(format!(
                "a member reports at most {MEMBER_METRICS_MAX} numbers, not {}",
                report.len()
            )));
        }
        report.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (i, (name, _)) in report.iter().enumerate() {
            let ok = !name.is_empty()
                && name.len() <= MEMBER_METRIC_NAME_MAX
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !ok {
                return Err(ClientError::InvalidArgument(format!(
                    "a reported number's name must be 1-{MEMBER_METRIC_NAME_MAX} bytes of [a-z0-9_]: {name:?}"
                )));
            }
            if i > 0 && report[i - 1].0 == *name {
                return Err(ClientError::InvalidArgument(format!(
                    "{name:?} is reported twice"
                )));
            }
        }
        *self.inner.report.lock() = report;
        Ok(())
    }

    /// The partitions this member owns now (none once a panic left the member in
    /// doubt: it reads nothing then, see [`ClientError::Poisoned`]).
    pub fn assignment(&self) -> Vec<u32> {
        self.inner
            .lock()
            .map(|st| st.partitions.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Gives back revoked partitions held by [`GroupConsumerBuilder::hold_revoked`]: the
    /// next heartbeat tells the broker, which then moves them. Partitions not held are
    /// ignored.
    pub fn release(&self, partitions: &[u32]) -> Result<(), ClientError> {
        let mut st = self.inner.lock()?;
        let (give, keep): (Vec<u32>, Vec<u32>) =
            st.held.iter().partition(|p| partitions.contains(p));
        st.held = keep;
        st.revoked.extend(give);
        drop(st);
        self.inner.wake.notify_one();
        Ok(())
    }

    /// The offset the member reads `partition` from next, if it owns it: where the
    /// group's stored offset (or `start_at`) put it, moved on by what was handed out.
    pub fn position(&self, partition: u32) -> Option<u64> {
        let st = self.inner.lock().ok()?;
        st.partitions
            .get(&partition)
            .map(|p| p.buffered.front().map_or(p.fetch_at, |r| r.offset))
    }

    /// The next record of any owned partition, waiting for one. `None` after shutdown.
    pub async fn next(&mut self) -> Option<Result<Record, ClientError>> {
        let closed = match self.inner.lock() {
            Ok(st) => st.closed,
            Err(e) => return Some(Err(e)),
        };
        if self.heartbeat.is_none() && !closed {
            return Some(Err(ClientError::InvalidArgument(
                "the consumer has not joined its group: call join() first".into(),
            )));
        }
        // The caller is done with the record handed out last: store what the policy says.
        let store = match self.inner.lock() {
            Ok(mut st) => st.done(Instant::now()),
            Err(e) => return Some(Err(e)),
        };
        if let Some((p, consumed)) = store
            && let Err(e) = self.auto_store(p, consumed).await
        {
            return Some(Err(e));
        }
        loop {
            // No await between taking a record in `step` and returning it: cancel-safe.
            let step = match self.step() {
                Ok(step) => step,
                Err(e) => return Some(Err(e)),
            };
            let (stores, pause_end) = match step {
                Step::Closed => return None,
                Step::Record(record) => return Some(Ok(record)),
                Step::Failed(e) => return Some(Err(e)),
                Step::Store(p, consumed) => {
                    if let Err(e) = self.auto_store(p, consumed).await {
                        return Some(Err(e));
                    }
                    continue;
                }
                Step::Finish(p, consumed) => {
                    // Cancel-safe: until the broker has it, the committer counts nothing
                    // stored, and the next call sends it again.
                    match self.store(p, consumed).await {
                        Ok(()) => {}
                        Err(e)
                            if matches!(
                                e.code(),
                                Some(
                                    ErrorCode::NotMember
                                        | ErrorCode::NotAssigned
                                        | ErrorCode::StaleGeneration
                                )
                            ) =>
                        {
                            // The range moved: its next owner finishes it.
                            tracing::info!(group = %self.inner.group, partition = p, error = %e, "storing a finished range's seal refused; refreshing the assignment");
                            match self.inner.lock() {
                                Ok(mut st) => {
                                    if let Some(part) = st.partitions.get_mut(&p) {
                                        part.finishing = true;
                                    }
                                }
                                Err(e) => return Some(Err(e)),
                            }
                        }
                        Err(e) => return Some(Err(e)),
                    }
                    // The broker hands out the range's children with the next
                    // heartbeat: send it now.
                    self.inner.wake.notify_one();
                    continue;
                }
                Step::Wait { stores, pause_end } => (stores, pause_end),
            };
            // Stores of polls that found the partitions drained, made while the fetches
            // wait (a durable store is not on the path of the next record); then wait
            // for an answer, new partitions or the end of a pause.
            for (p, consumed) in stores {
                if let Err(e) = self.auto_store(p, consumed).await {
                    return Some(Err(e));
                }
            }
            let wake_at = pause_end.unwrap_or_else(Instant::now);
            let done = tokio::select! {
                done = self.fetches.join_next_with_id(), if !self.fetches.is_empty() => done,
                () = self.inner.assigned.notified() => None,
                () = tokio::time::sleep_until(wake_at.into()), if pause_end.is_some() => None,
            };
            if let Some(done) = done {
                match self.inner.lock() {
                    Ok(mut st) => file(&mut st, done),
                    Err(e) => return Some(Err(e)),
                }
            }
        }
    }

    /// One look at the owned partitions, without waiting: takes in the fetches that
    /// answered, starts the fetches due (ahead of the caller, while records are still
    /// buffered), then hands out the next record round-robin over partitions, starting
    /// a new poll result of its partition where the last one is used up.
    fn step(&mut self) -> Result<Step, ClientError> {
        let now = Instant::now();
        let inner = &*self.inner;
        let mut st = inner.lock()?;
        if st.closed {
            return Ok(Step::Closed);
        }
        while let Some(done) = self.fetches.try_join_next_with_id() {
            file(&mut st, done);
        }
        if let Some(e) = take_ready(inner, &mut st, now, true) {
            return Ok(Step::Failed(e));
        }
        let pause_end = start_fetches(inner, &mut st, &mut self.fetches, now);
        let pending = st.pending;
        let finish = st
            .partitions
            .iter()
            .find_map(|(&p, part)| Some((p, part.finish_due(p, pending, inner.policy)?)));
        if let Some((p, consumed)) = finish {
            let part = st.partitions.get_mut(&p).expect("found above");
            // A read waiting at the seal finds nothing, ever.
            part.fetch = None;
            part.sub = None;
            return Ok(Step::Finish(p, consumed));
        }
        let Some(p) = st.next_buffered() else {
            // Every partition is drained: a poll of each, for the policies that store
            // there.
            let stores = st
                .partitions
                .iter_mut()
                .filter_map(|(p, part)| part.committer.polling(now).map(|c| (*p, c)))
                .collect();
            return Ok(Step::Wait { stores, pause_end });
        };
        let batch_length = inner.batch_length;
        let part = st.partitions.get_mut(&p).expect("found above");
        if part.poll_left == 0 {
            let store = part.committer.polling(now);
            part.start_poll(batch_length);
            if let Some(consumed) = store {
                return Ok(Step::Store(p, consumed));
            }
        }
        Ok(Step::Record(st.hand_out(p)))
    }

    /// The next record of an owned partition's current poll result if the commit policy
    /// has nothing to store first, without waiting: `None` says only that
    /// [`GroupConsumer::next`] is needed now (no poll result is under way, a store is
    /// due, a fetch answered with an error, the member has not joined or is shut down). Hands
    /// out as [`GroupConsumer::next`] does (the record before counts as handled), so the
    /// SDKs for other languages hand out a fetched batch without an `await` per record;
    /// mixing the two keeps the order.
    pub fn try_next(&mut self) -> Option<Record> {
        self.heartbeat.as_ref()?;
        let now = Instant::now();
        let inner = &*self.inner;
        let mut st = inner.lock().ok()?;
        if st.closed {
            return None;
        }
        while let Some(done) = self.fetches.try_join_next_with_id() {
            file(&mut st, done);
        }
        // Answers with an error wait for `next`, which returns them.
        take_ready(inner, &mut st, now, false);
        start_fetches(inner, &mut st, &mut self.fetches, now);
        // A new poll result starts only in `next` (the poll the commit policies count):
        // the next partition in turn with one under way.
        let p = st.next_in_poll()?;
        // What `done` of the record handed out last would store, found on a copy: with
        // a store due, `next` does it.
        let due = st
            .pending
            .and_then(|q| st.partitions.get(&q))
            .is_some_and(|part| part.committer.clone().done(now).is_some());
        if due {
            return None;
        }
        let stored = st.done(now);
        debug_assert!(stored.is_none(), "checked on a copy above");
        Some(st.hand_out(p))
    }

    /// Like [`GroupConsumer::next`], failing with [`ClientError::Timeout`] if no record
    /// arrives within `timeout`.
    pub async fn next_within(&mut self, timeout: Duration) -> Result<Record, ClientError> {
        match tokio::time::timeout(timeout, self.next()).await {
            Ok(Some(r)) => r,
            Ok(None) => Err(ClientError::Shutdown),
            Err(_) => Err(ClientError::Timeout(timeout)),
        }
    }

    /// The records as a `Stream` (ending after shutdown). Dropping the stream stops the
    /// member's heartbeats without leaving the group: its partitions move when its
    /// session expires (or at once over TCP, when the client's connection closes).
    pub fn into_stream(self) -> impl Stream<Item = Result<Record, ClientError>> {
        futures::stream::unfold(self, |mut c| async move { c.next().await.map(|r| (r, c)) })
    }

    /// A store the commit policy asked for. If the broker says this member no longer
    /// owns the partition (or is no longer in the group, as after a server restart, or
    /// the store was sent for the session before a rejoin that overtook it), the
    /// assignment is stale: the heartbeat task is woken to catch up (rejoining if
    /// needed) and reading goes on; the next owner re-reads from the group's offset.
    async fn auto_store(&self, partition: u32, consumed: u64) -> Result<(), ClientError> {
        match self.store(partition, consumed).await {
            Err(e)
                if matches!(
                    e.code(),
                    Some(
                        ErrorCode::NotMember | ErrorCode::NotAssigned | ErrorCode::StaleGeneration
                    )
                ) =>
            {
                tracing::info!(group = %self.inner.group, partition, error = %e, "automatic store refused; refreshing the assignment");
                self.inner.wake.notify_one();
                Ok(())
            }
            other => other,
        }
    }

    async fn store(&self, partition: u32, consumed: u64) -> Result<(), ClientError> {
        self.inner.commit_next(partition, consumed + 1).await?;
        if let Some(part) = self.inner.lock()?.partitions.get_mut(&partition) {
            part.committer.stored(consumed);
        }
        Ok(())
    }

    /// Stores `record` as consumed. Refused with `NOT_ASSIGNED` if the partition moved
    /// to another member meanwhile. The record handed out last counts as handled from
    /// then on.
    pub async fn commit(&self, record: &Record) -> Result<(), ClientError> {
        self.store_offset(record.position()).await
    }

    /// Stores the record at `consumed` as consumed (fenced like
    /// [`GroupConsumer::commit`]).
    /// The record handed out last counts as handled from then on.
    pub async fn store_offset(&self, consumed: Position) -> Result<(), ClientError> {
        self.inner.lock()?.finish_pending();
        self.store(consumed.partition, consumed.offset).await
    }

    /// Deletes the group's stored offset of `partition`, which this member must own now
    /// (fenced like [`GroupConsumer::commit`]: `NOT_ASSIGNED` otherwise). Reading goes
    /// on where it is; an automatic policy stores the partition's offset again when it
    /// is next due. Once deleted and not stored again, the partition's next owner starts
    /// at its `start_at`. To delete an offset of a group without members, as an
    /// operator, see [`Topic::delete_group_offset`].
    pub async fn delete_offset(&self, partition: u32) -> Result<(), ClientError> {
        let member_id = self.inner.member_id();
        let generation = self.inner.lock()?.generation;
        self.inner
            .call(RequestBody::DeleteGroupOffset(DeleteGroupOffsetRequest {
                stream: self.inner.topic.stream.to_string(),
                topic: self.inner.topic.name.to_string(),
                group: self.inner.group.clone(),
                member_id,
                generation,
                partition,
            }))
            .await?;
        if let Some(part) = self.inner.lock()?.partitions.get_mut(&partition) {
            part.committer.forget_stored();
        }
        Ok(())
    }

    /// The offset of the last record handed out of `partition` (`None` once a panic
    /// left the member in doubt, see [`ClientError::Poisoned`]).
    pub fn last_consumed_offset(&self, partition: u32) -> Option<u64> {
        let st = self.inner.lock().ok()?;
        st.partitions
            .get(&partition)
            .and_then(|p| p.committer.last_handed())
    }

    /// The last offset of `partition` stored as consumed, as this member knows it
    /// (`None` once a panic left the member in doubt).
    pub fn last_stored_offset(&self, partition: u32) -> Option<u64> {
        let st = self.inner.lock().ok()?;
        st.partitions
            .get(&partition)
            .and_then(|p| p.committer.last_stored())
    }

    /// Stores final offsets as the policy says and leaves the group at once, so the
    /// partitions move to the other members without waiting for a timeout.
    pub async fn shutdown(&mut self) -> Result<(), ClientError> {
        let mut first_error = None;
        let stores: Vec<(u32, u64)> = match self.inner.lock() {
            Ok(mut st) => {
                if st.closed {
                    return Ok(());
                }
                st.closed = true;
                let now = Instant::now();
                st.partitions
                    .iter_mut()
                    .filter_map(|(p, part)| part.committer.shutdown(now).map(|c| (*p, c)))
                    .collect()
            }
            // What was handed out is in doubt: store nothing, but leave, so that the
            // partitions move on at once.
            Err(e) => {
                first_error = Some(e);
                Vec::new()
            }
        };
        self.inner.wake.notify_one();
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        self.fetches.abort_all();
        for (p, consumed) in stores {
            if let Err(e) = self.inner.commit_next(p, consumed + 1).await {
                first_error.get_or_insert(e);
            }
        }
        let member_id = self.inner.member_id();
        let left = self
            .inner
            .call(RequestBody::LeaveGroup(LeaveGroupRequest {
                stream: self.inner.topic.stream.to_string(),
                topic: self.inner.topic.name.to_string(),
                group: self.inner.group.clone(),
                member_id,
            }))
            .await;
        if let Err(e) = left
            && e.code() != Some(ErrorCode::NotMember)
        {
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }
}
