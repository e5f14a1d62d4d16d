//! `rill bench e2e --group`: the records are received by the members of a consumer
//! group (`GroupConsumer::next`, as an application reads them) instead of by raw
//! fetches, so the measured latency includes how a member waits for records.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rill_client::{CommitPolicy, GroupConsumer, Topic};
use tokio::sync::watch;

use super::stats::Latency;
use super::workers::{Progress, Role, STALL, TaskResult, Tasks, now_us};
use super::{GroupCommit, Plan};

/// Joins `plan.consumers` members of a fresh group `group` that start at `starts` (the
/// partitions' current ends), waits until the group has settled (every partition owned,
/// no revocation pending), and spawns one task per member that receives records until
/// `target` arrived in all. Producers should start only after this returns, so no record
/// waits for a rebalance.
pub(super) async fn spawn_members(
    tasks: &mut Tasks,
    topic: &Topic,
    plan: &Arc<Plan>,
    group: &str,
    starts: &[u64],
    target: u64,
    progress: &Arc<Progress>,
) -> anyhow::Result<()> {
    seed(topic, group, starts).await?;
    let policy = match plan.commit_policy {
        GroupCommit::Polling => CommitPolicy::Polling,
        GroupCommit::Disabled => CommitPolicy::Disabled,
    };
    let mut members = Vec::with_capacity(plan.consumers);
    for _ in 0..plan.consumers {
        members.push(
            topic
                .consumer_group(group)
                .commit_policy(policy)
                .build()
                .await
                .with_context(|| format!("cannot join bench group {group}"))?,
        );
    }
    settle(topic, group, plan.consumers).await?;
    let (done_tx, done_rx) = watch::channel(false);
    let done_tx = Arc::new(done_tx);
    for (index, member) in members.into_iter().enumerate() {
        let task = Member {
            member,
            progress: Arc::clone(progress),
            target,
            done_tx: Arc::clone(&done_tx),
            done_rx: done_rx.clone(),
        };
        tasks.spawn(async move {
            task.run()
                .await
                .with_context(|| format!("group member {index}"))
        });
    }
    Ok(())
}

/// Stores `starts[p] - 1` as consumed for every non-empty partition, through a member
/// that joins alone (so it owns every partition at once) and leaves, so the measured
/// members start at the ends and not at the records of earlier phases.
async fn seed(topic: &Topic, group: &str, starts: &[u64]) -> anyhow::Result<()> {
    let mut seeder = topic
        .consumer_group(group)
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .with_context(|| format!("cannot join bench group {group}"))?;
    for (p, &start) in starts.iter().enumerate() {
        let p = u32::try_from(p).context("partition number")?;
        if let Some(last) = start.checked_sub(1) {
            seeder
                .store_offset(rill_client::Position::new(p, last))
                .await
                .with_context(|| format!("cannot store the start of partition {p}"))?;
        }
    }
    seeder.shutdown().await.context("the seeding member")?;
    Ok(())
}

/// Waits until `members` members own every partition and none is revoking.
async fn settle(topic: &Topic, group: &str, members: usize) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let d = topic.describe_group(group).await?;
        if d.members.len() == members
            && d.partitions.iter().all(|p| p.owner.is_some())
            && d.members.iter().all(|m| m.revoking.is_empty())
        {
            return Ok(());
        }
        if started.elapsed() > STALL {
            anyhow::bail!("bench group {group} did not settle in {STALL:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[derive(Debug)]
struct Member {
    member: GroupConsumer,
    progress: Arc<Progress>,
    target: u64,
    done_tx: Arc<watch::Sender<bool>>,
    done_rx: watch::Receiver<bool>,
}

impl Member {
    async fn run(mut self) -> anyhow::Result<TaskResult> {
        let mut latency = Latency::new();
        let (mut records, mut bytes) = (0u64, 0u64);
        let mut last_receive = None;
        loop {
            let next = tokio::select! {
                biased;
                _ = self.done_rx.wait_for(|d| *d) => break,
                next = self.member.next() => next,
            };
            let Some(record) = next else { break };
            let record = record.context("receiving")?;
            let received = Instant::now();
            let sent = record
                .value
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_le_bytes)
                .with_context(|| {
                    format!(
                        "record {}/{} has no send time in its value",
                        record.partition, record.offset
                    )
                })?;
            latency.record_n_us(now_us().saturating_sub(sent), 1);
            bytes += record.value.len() as u64;
            records += 1;
            last_receive = Some(received);
            if self.progress.add(1) >= self.target {
                self.done_tx.send_replace(true);
            }
        }
        self.member.shutdown().await.context("leaving the group")?;
        Ok(TaskResult {
            role: Role::Consumer,
            latency,
            records,
            bytes,
            last_receive,
        })
    }
}
