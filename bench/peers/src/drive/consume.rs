//! The consume phases: fill the log, read the warm-up, then read the rest exactly from
//! a common start.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::produce::send_phase;
use super::source::Source;
use super::tasks::{Measured, Outcome, Shared, Start, finish, started, wait_until};
use super::{Peer, Reader, STALL, partitions_of, share};
use crate::measure::Latency;
use crate::workload::Workload;

/// Splits `total` (at most the sum of `holdings`) over partitions in proportion to what
/// each holds, exactly: floors first, then one more to each of the first that have room.
fn split_by(total: u64, holdings: &[u64]) -> Vec<u64> {
    let sum: u128 = holdings.iter().map(|&h| u128::from(h)).sum();
    if sum == 0 {
        return vec![0; holdings.len()];
    }
    let total = u128::from(total).min(sum);
    let mut parts: Vec<u64> = holdings
        .iter()
        .map(|&h| u64::try_from(total * u128::from(h) / sum).unwrap_or(h))
        .collect();
    let mut left = u64::try_from(total).unwrap_or(u64::MAX) - parts.iter().sum::<u64>();
    // Fewer than `holdings.len()` are left, and there is room for them (total <= sum).
    while left > 0 {
        for (part, &h) in parts.iter_mut().zip(holdings) {
            if left > 0 && *part < h {
                *part += 1;
                left -= 1;
            }
        }
    }
    parts
}

/// Consume: fill, read the warm-up, then read the rest from a common start.
pub(super) async fn consume<P: Peer>(peer: &P, w: &Workload) -> anyhow::Result<Measured> {
    let holdings = fill(peer, w).await.context("filling the log")?;
    let total: u64 = holdings.iter().sum();
    anyhow::ensure!(
        total == w.warmup + w.messages,
        "the fill sent {total} records, expected {}",
        w.warmup + w.messages
    );
    let warm = split_by(w.warmup, &holdings);
    let shared = Arc::new(Shared::new());
    let (tx, rx) = watch::channel(None::<Start>);
    let mut set = JoinSet::new();
    let mut readers = 0;
    for c in 0..w.consumers {
        let parts = partitions_of(c, w.consumers, w.partitions);
        if parts.is_empty() {
            continue;
        }
        let mut reader = peer
            .reader(c, &parts)
            .await
            .with_context(|| format!("starting consumer {c}"))?;
        readers += 1;
        let first: Vec<(u32, u64)> = parts.iter().map(|&p| (p, warm[p as usize])).collect();
        let rest: Vec<(u32, u64)> = parts
            .iter()
            .map(|&p| (p, holdings[p as usize] - warm[p as usize]))
            .collect();
        let (shared, mut rx, batch) = (Arc::clone(&shared), rx.clone(), w.batch);
        set.spawn(async move {
            let mut out = Outcome::default();
            read_exactly(&mut reader, first, batch, None)
                .await
                .with_context(|| format!("consumer {c}, warm-up"))?;
            shared.warmed.fetch_add(1, Ordering::SeqCst);
            started(&mut rx).await?;
            read_exactly(&mut reader, rest, batch, Some(&mut out.latency))
                .await
                .with_context(|| format!("consumer {c}"))?;
            out.end = Some(Instant::now());
            anyhow::Ok(out)
        });
    }
    let mut done = Vec::new();
    wait_until(&mut set, &mut done, "the consumers' warm-up", || {
        shared.warmed.load(Ordering::SeqCst) >= readers
    })
    .await?;
    let start = Start::now();
    tx.send_replace(Some(start));
    finish(&mut set, &mut done).await?;
    Ok(Measured::merge(start.at, &done))
}

/// Sends `warmup + messages` records with all producers at full speed; returns how many
/// went to each partition.
async fn fill<P: Peer>(peer: &P, w: &Workload) -> anyhow::Result<Vec<u64>> {
    let mut set = JoinSet::new();
    for j in 0..w.producers {
        let mut sender = peer
            .producer(j)
            .await
            .with_context(|| format!("connecting producer {j}"))?;
        let w = w.clone();
        set.spawn(async move {
            let mut out = Outcome {
                per_partition: vec![0; w.partitions as usize],
                ..Outcome::default()
            };
            send_phase(
                &mut sender,
                &mut Source::new(&w, j),
                share(w.warmup + w.messages, w.producers, j),
                w.batch,
                None,
                Start::now(),
                None,
                &mut out.per_partition,
            )
            .await
            .with_context(|| format!("producer {j}"))?;
            anyhow::Ok(out)
        });
    }
    let mut done = Vec::new();
    finish(&mut set, &mut done).await?;
    let mut holdings = vec![0u64; w.partitions as usize];
    for out in &done {
        for (h, n) in holdings.iter_mut().zip(&out.per_partition) {
            *h += n;
        }
    }
    Ok(holdings)
}

/// Reads exactly `want` records from each partition, round-robin, fetches of at most
/// `batch`; records each fetch's latency into `latency`.
async fn read_exactly<R: Reader>(
    reader: &mut R,
    mut want: Vec<(u32, u64)>,
    batch: usize,
    mut latency: Option<&mut Latency>,
) -> anyhow::Result<()> {
    let mut last_progress = Instant::now();
    while want.iter().any(|&(_, left)| left > 0) {
        let mut progressed = false;
        for (partition, left) in want.iter_mut().filter(|(_, left)| *left > 0) {
            let max = (*left).min(batch as u64) as usize;
            let t0 = Instant::now();
            let got = tokio::time::timeout(STALL, reader.fetch(*partition, max))
                .await
                .map_err(|_| anyhow::anyhow!("a fetch did not return within {STALL:?}"))??;
            if let Some(latency) = latency.as_deref_mut() {
                latency.record(t0.elapsed());
            }
            anyhow::ensure!(
                got <= max,
                "a fetch of at most {max} records from partition {partition} returned {got}"
            );
            *left -= got as u64;
            progressed |= got > 0;
        }
        if progressed {
            last_progress = Instant::now();
        } else {
            let left: u64 = want.iter().map(|&(_, l)| l).sum();
            anyhow::ensure!(
                last_progress.elapsed() < STALL,
                "{left} records still to read, but nothing came for {STALL:?}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_split_is_proportional_and_exact() {
        assert_eq!(split_by(10, &[50, 50]), vec![5, 5]);
        assert_eq!(split_by(10, &[10]), vec![10]);
        assert_eq!(split_by(3, &[1, 1, 1, 1]), vec![1, 1, 1, 0]);
        assert_eq!(split_by(5, &[0, 10]), vec![0, 5]);
        assert_eq!(split_by(5, &[]), Vec::<u64>::new());
        let holdings = [549_921, 550_330, 549_600, 550_149];
        let parts = split_by(200_000, &holdings);
        assert_eq!(parts.iter().sum::<u64>(), 200_000);
        for (p, h) in parts.iter().zip(holdings) {
            assert!(*p <= h);
            assert!(p.abs_diff(200_000 * h / holdings.iter().sum::<u64>()) <= 1);
        }
        // Never more than a partition holds, even asked for more than all.
        assert_eq!(split_by(100, &[2, 3]), vec![2, 3]);
    }
}
