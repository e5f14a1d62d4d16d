//! Consumer groups (`rill_client::GroupConsumer`): the broker assigns partitions to
//! members and moves them as members join, leave or go silent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;
use rill_client::{ClientError, GroupConsumer, GroupConsumerBuilder, Position, Record, Topic};

use crate::consumer::{CommonOptions, Shared, commit_policy, start_at, within};
use crate::convert::{PackedRecords, RecordOut, offset_in, offset_out, record_out};
use crate::error::to_napi;
use crate::runtime::{Cancel, Canceller, Fail, spawn};

/// Group-member options.
#[napi(object)]
#[derive(Debug, Default)]
pub struct GroupOptions {
    pub common: Option<CommonOptions>,
    pub member_id: Option<String>,
    pub session_timeout_ms: Option<u32>,
    pub create_group: Option<bool>,
}

fn ms(n: u32) -> Duration {
    Duration::from_millis(u64::from(n))
}

/// The SDK's builder of a group member.
pub(crate) fn builder(
    topic: &Topic,
    group: &str,
    o: GroupOptions,
) -> napi::Result<GroupConsumerBuilder> {
    let c = o.common.unwrap_or_default();
    let start = start_at(&c).map_err(to_napi)?;
    let policy = commit_policy(&c).map_err(to_napi)?;
    let mut b = topic.consumer_group(group);
    if let Some(id) = o.member_id {
        b = b.member_id(id);
    }
    if let Some(t) = o.session_timeout_ms {
        b = b.session_timeout(ms(t));
    }
    if let Some(on) = o.create_group {
        b = b.create_group(on);
    }
    if let Some(n) = c.batch_length {
        b = b.batch_length(n);
    }
    if let Some(t) = c.poll_interval_ms {
        b = b.poll_interval(ms(t));
    }
    if let Some(start) = start {
        b = b.start_at(start);
    }
    if c.allow_replay.unwrap_or(false) {
        b = b.allow_replay();
    }
    if let Some(policy) = policy {
        b = b.commit_policy(policy);
    }
    if let Some(t) = c.max_wait_ms {
        b = b.max_wait(ms(t));
    }
    if let Some(t) = c.polling_retry_interval_ms {
        b = b.polling_retry_interval(ms(t));
    }
    Ok(b)
}

/// A partition as the member knows it.
#[derive(Debug, Clone, Copy, Default)]
struct Owned {
    position: Option<u64>,
    last_consumed: Option<u64>,
    last_stored: Option<u64>,
}

/// What a member reports about itself while a call holds it.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    member_id: String,
    partitions: BTreeMap<u32, Owned>,
}

fn snapshot_of(c: &GroupConsumer) -> Snapshot {
    Snapshot {
        member_id: c.member_id(),
        partitions: c
            .assignment()
            .into_iter()
            .map(|p| {
                let owned = Owned {
                    position: c.position(p),
                    last_consumed: c.last_consumed_offset(p),
                    last_stored: c.last_stored_offset(p),
                };
                (p, owned)
            })
            .collect(),
    }
}

/// A member of a consumer group.
#[napi]
#[derive(Debug)]
pub struct NativeGroupConsumer {
    group: String,
    shared: Arc<Shared<GroupConsumer>>,
    snapshot: Arc<parking_lot::Mutex<Snapshot>>,
}

impl NativeGroupConsumer {
    pub(crate) fn new(consumer: GroupConsumer, group: String) -> Self {
        let snapshot = crate::runtime::enter(|| snapshot_of(&consumer));
        Self {
            group,
            shared: Shared::new(consumer),
            snapshot: Arc::new(parking_lot::Mutex::new(snapshot)),
        }
    }

    fn snapshot_now(&self) -> Snapshot {
        if let Ok(state) = self.shared.state.try_lock()
            && let Some(c) = state.get()
        {
            let now = snapshot_of(c);
            *self.snapshot.lock() = now.clone();
            return now;
        }
        self.snapshot.lock().clone()
    }
}

async fn group_next(
    shared: &Shared<GroupConsumer>,
    snapshot: &parking_lot::Mutex<Snapshot>,
    cancel: &mut Cancel,
) -> Result<Option<Record>, Fail> {
    shared
        .next(
            cancel,
            |c| Box::pin(c.next()),
            |c| {
                *snapshot.lock() = snapshot_of(c);
            },
        )
        .await
}

#[napi]
impl NativeGroupConsumer {
    /// The group's name.
    #[napi(getter)]
    pub fn group(&self) -> String {
        self.group.clone()
    }

    /// This member's id.
    #[napi(getter)]
    pub fn member_id(&self) -> String {
        self.snapshot_now().member_id
    }

    /// The partitions this member owns.
    #[napi]
    pub fn assignment(&self) -> Vec<u32> {
        self.snapshot_now().partitions.keys().copied().collect()
    }

    /// The offset the member reads `partition` from next, if it owns it.
    #[napi]
    pub fn position(&self, partition: u32) -> Option<i64> {
        self.snapshot_now()
            .partitions
            .get(&partition)
            .and_then(|o| o.position)
            .map(offset_out)
    }

    /// The offset of the last record of `partition` handed out.
    #[napi]
    pub fn last_consumed_offset(&self, partition: u32) -> Option<i64> {
        self.snapshot_now()
            .partitions
            .get(&partition)
            .and_then(|o| o.last_consumed)
            .map(offset_out)
    }

    /// The last offset of `partition` stored as consumed, as this member knows it.
    #[napi]
    pub fn last_stored_offset(&self, partition: u32) -> Option<i64> {
        self.snapshot_now()
            .partitions
            .get(&partition)
            .and_then(|o| o.last_stored)
            .map(offset_out)
    }

    /// The next record of any owned partition; `null` after `shutdown()`.
    #[napi]
    pub fn next<'env>(
        &self,
        env: &'env Env,
        canceller: Option<&Canceller>,
    ) -> napi::Result<PromiseRaw<'env, Option<RecordOut>>> {
        let (shared, snapshot) = (Arc::clone(&self.shared), Arc::clone(&self.snapshot));
        let mut cancel = Cancel::of(canceller);
        spawn(env, async move {
            Ok(group_next(&shared, &snapshot, &mut cancel)
                .await?
                .map(record_out))
        })
    }

    /// The next record if one was fetched already and nothing must be stored first,
    /// without a promise; else `null`, and `next()` is needed. Hands out as `next()`
    /// does (`rill_client::GroupConsumer::try_next`).
    #[napi]
    pub fn try_next(&self) -> Option<RecordOut> {
        let mut state = self.shared.try_running()?;
        state.get_mut()?.try_next().map(record_out)
    }

    /// Up to `maxResults` records as `tryNext` hands them out, packed, in one call
    /// (`poll()` in JS): it stops where a store is due, and none says `next()` is
    /// needed.
    #[napi]
    pub fn try_take(&self, max_results: u32) -> PackedRecords {
        self.shared.try_take(max_results, GroupConsumer::try_next)
    }

    /// Like `next()`, failing with `TimeoutError` after `timeoutMs`.
    #[napi]
    pub fn next_within<'env>(
        &self,
        env: &'env Env,
        timeout_ms: u32,
        canceller: Option<&Canceller>,
    ) -> napi::Result<PromiseRaw<'env, RecordOut>> {
        let (shared, snapshot) = (Arc::clone(&self.shared), Arc::clone(&self.snapshot));
        let mut cancel = Cancel::of(canceller);
        spawn(env, async move {
            let r = within(timeout_ms, group_next(&shared, &snapshot, &mut cancel)).await?;
            Ok(record_out(r))
        })
    }

    /// Stores the record at `offset` of `partition` as consumed, fenced by the group's
    /// generation: `NotAssignedError` if the partition moved to another member.
    #[napi]
    pub fn commit<'env>(
        &self,
        env: &'env Env,
        partition: u32,
        offset: i64,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let offset = offset_in("offset", offset).map_err(to_napi)?;
        let (shared, snapshot) = (Arc::clone(&self.shared), Arc::clone(&self.snapshot));
        spawn(env, async move {
            let state = shared.state.lock().await;
            let c = state.get().ok_or(ClientError::Shutdown)?;
            let r = c.store_offset(Position::new(partition, offset)).await;
            *snapshot.lock() = snapshot_of(c);
            Ok(r?)
        })
    }

    /// Deletes the group's stored offset of `partition`, which this member must own.
    #[napi]
    pub fn delete_offset<'env>(
        &self,
        env: &'env Env,
        partition: u32,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let shared = Arc::clone(&self.shared);
        spawn(env, async move {
            let state = shared.state.lock().await;
            let c = state.get().ok_or(ClientError::Shutdown)?;
            Ok(c.delete_offset(partition).await?)
        })
    }

    /// Stores final offsets as the policy says and leaves the group at once. A waiting
    /// `next()` ends. Again: nothing.
    #[napi]
    pub fn shutdown<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let (shared, snapshot) = (Arc::clone(&self.shared), Arc::clone(&self.snapshot));
        spawn(env, async move {
            shared.stop();
            let mut state = shared.state.lock().await;
            let result = match state.get_mut() {
                Some(c) => {
                    let r = c.shutdown().await;
                    *snapshot.lock() = Snapshot {
                        member_id: c.member_id(),
                        partitions: BTreeMap::new(),
                    };
                    r
                }
                None => Ok(()),
            };
            drop(state.take());
            Ok(result?)
        })
    }
}
