//! The e2e phases: followers from the end of the log, then the producers; latency per
//! record from its send stamp to its receipt.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::Context as _;
use tokio::task::JoinSet;

use super::pace::Pace;
use super::produce::produce;
use super::tasks::{Measured, Outcome, Shared, finish};
use super::{Follower, Peer, STALL, partitions_of};
use crate::measure::now_us;
use crate::workload::Workload;

/// E2e: followers first, then the producers; latency per record, elapsed to the
/// receipt of the last measured record.
pub(super) async fn e2e<P: Peer>(
    peer: &P,
    w: &Workload,
    pace: Option<Pace>,
) -> anyhow::Result<Measured> {
    let shared = Arc::new(Shared::new());
    let target = w.warmup + w.messages;
    let mut followers = JoinSet::new();
    for c in 0..w.consumers {
        let parts = partitions_of(c, w.consumers, w.partitions);
        if parts.is_empty() {
            continue;
        }
        let mut follower = peer
            .follower(c, &parts)
            .await
            .with_context(|| format!("starting consumer {c}"))?;
        let (shared, warmup) = (Arc::clone(&shared), w.warmup);
        followers.spawn(async move {
            follow(&mut follower, &shared, warmup, target)
                .await
                .with_context(|| format!("consumer {c}"))
        });
    }
    shared.mark_progress();
    let sent = produce(peer, w, pace, Some((&shared, &mut followers))).await?;
    let mut outs = Vec::new();
    finish(&mut followers, &mut outs).await?;
    let received = shared.received.load(Ordering::SeqCst);
    anyhow::ensure!(
        received == target,
        "the consumers received {received} records, {target} were sent"
    );
    anyhow::ensure!(
        outs.iter().any(|o| o.end.is_some()) || w.messages == 0,
        "no measured record was received"
    );
    Ok(Measured::merge(sent.start, &outs))
}

/// One follower until all `target` records have been received by all followers.
async fn follow<F: Follower>(
    follower: &mut F,
    shared: &Shared,
    warmup: u64,
    target: u64,
) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let mut stamps = Vec::new();
    while shared.received.load(Ordering::SeqCst) < target {
        stamps.clear();
        tokio::time::timeout(STALL, follower.poll(&mut stamps))
            .await
            .map_err(|_| anyhow::anyhow!("a read did not return within {STALL:?}"))??;
        if stamps.is_empty() {
            if shared.since_progress() > STALL {
                anyhow::bail!(
                    "received {} of {target} records, then nothing for {STALL:?}",
                    shared.received.load(Ordering::SeqCst)
                );
            }
            continue;
        }
        let (now, at) = (now_us(), Instant::now());
        let n = stamps.len() as u64;
        let before = shared.received.fetch_add(n, Ordering::SeqCst);
        shared.mark_progress();
        anyhow::ensure!(
            before + n <= target,
            "received {} records, only {target} were sent",
            before + n
        );
        // Measured records are sent only once the whole warm-up has been received, so a
        // read is either all warm-up or all measured.
        if before >= warmup {
            for &s in &stamps {
                out.latency.record_us(now.saturating_sub(s));
            }
            out.end = Some(at);
        }
    }
    Ok(out)
}
