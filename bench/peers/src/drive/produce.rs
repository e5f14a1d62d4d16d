//! The produce phase (and the producer side of e2e): each producer's requests, at max
//! rate or paced, and the warm-up and measured phases from a common start.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::pace::{Pace, pause_until};
use super::source::Source;
use super::tasks::{Measured, Outcome, Shared, Start, collect, finish, started, wait_until};
use super::{POLL, Peer, STALL, Sender, share};
use crate::measure::{Latency, now_us};
use crate::workload::Workload;

/// Sends `count` records of `source` in requests of at most `batch`, one in flight:
/// as fast as acknowledged, or paced from `start`. Records latency into `latency` (per
/// request at max rate, per record from its due time when paced), adds the records sent
/// to each partition to `per_partition`, and returns when the last ack came.
#[allow(clippy::too_many_arguments)] // One phase of one producer, spelled out.
pub(super) async fn send_phase<S: Sender>(
    sender: &mut S,
    source: &mut Source,
    count: u64,
    batch: usize,
    pace: Option<Pace>,
    start: Start,
    mut latency: Option<&mut Latency>,
    per_partition: &mut [u64],
) -> anyhow::Result<Instant> {
    let batch = batch.max(1);
    let mut sent = 0u64;
    let mut last = Instant::now();
    while sent < count {
        let (n, first_due) = match pace {
            None => ((count - sent).min(batch as u64), None),
            Some(pace) => {
                let due = pace.due(Instant::now().saturating_duration_since(start.at), count);
                if due <= sent {
                    pause_until(start.at + pace.offset(sent)).await?;
                    continue;
                }
                ((due - sent).min(batch as u64), Some(sent))
            }
        };
        let records = match (pace, first_due) {
            (Some(pace), Some(first)) => source.take(n as usize, |k| {
                start.epoch_us + micros(pace.offset(first + k))
            }),
            _ => {
                let stamp = now_us();
                source.take(n as usize, |_| stamp)
            }
        };
        for r in &records {
            if let Some(c) = per_partition.get_mut(r.partition as usize) {
                *c += 1;
            }
        }
        let sent_at = Instant::now();
        tokio::time::timeout(STALL, sender.send(records))
            .await
            .map_err(|_| anyhow::anyhow!("a request was not acknowledged within {STALL:?}"))??;
        last = Instant::now();
        if let Some(latency) = latency.as_deref_mut() {
            match (pace, first_due) {
                (Some(pace), Some(first)) => {
                    for k in 0..n {
                        let due = start.at + pace.offset(first + k);
                        latency.record(last.saturating_duration_since(due));
                    }
                }
                _ => latency.record(last - sent_at),
            }
        }
        sent += n;
    }
    Ok(last)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Produce (and the producer side of e2e): warm-up, then the measured phase from a
/// common start. With `follow` (e2e), the measured phase waits until the followers
/// have received the whole warm-up, and producers record no latency.
pub(super) async fn produce<P: Peer>(
    peer: &P,
    w: &Workload,
    pace: Option<Pace>,
    follow: Option<(&Shared, &mut JoinSet<anyhow::Result<Outcome>>)>,
) -> anyhow::Result<Measured> {
    let shared = Arc::new(Shared::new());
    let (tx, rx) = watch::channel(None::<Start>);
    let mut set = JoinSet::new();
    for j in 0..w.producers {
        let mut sender = peer
            .producer(j)
            .await
            .with_context(|| format!("connecting producer {j}"))?;
        let (w, shared, mut rx) = (w.clone(), Arc::clone(&shared), rx.clone());
        let record_latency = follow.is_none();
        set.spawn(async move {
            let mut source = Source::new(&w, j);
            let mut out = Outcome {
                per_partition: vec![0; w.partitions as usize],
                ..Outcome::default()
            };
            let warmup = share(w.warmup, w.producers, j);
            send_phase(
                &mut sender,
                &mut source,
                warmup,
                w.batch,
                pace,
                Start::now(),
                None,
                &mut out.per_partition,
            )
            .await
            .with_context(|| format!("producer {j}, warm-up"))?;
            shared.warmed.fetch_add(1, Ordering::SeqCst);
            let start = started(&mut rx).await?;
            let end = send_phase(
                &mut sender,
                &mut source,
                share(w.messages, w.producers, j),
                w.batch,
                pace,
                start,
                record_latency.then_some(&mut out.latency),
                &mut out.per_partition,
            )
            .await
            .with_context(|| format!("producer {j}"))?;
            out.end = Some(end);
            anyhow::Ok(out)
        });
    }
    let mut done = Vec::new();
    let producers = w.producers;
    match follow {
        None => {
            wait_until(&mut set, &mut done, "the producers' warm-up", || {
                shared.warmed.load(Ordering::SeqCst) >= producers
            })
            .await?;
        }
        Some((followed, followers)) => {
            let warmup = w.warmup;
            // Both sets are checked so that an error on either side ends the wait.
            let mut discard = Vec::new();
            loop {
                let ready = shared.warmed.load(Ordering::SeqCst) >= producers
                    && followed.received.load(Ordering::SeqCst) >= warmup;
                if ready {
                    break;
                }
                tokio::select! {
                    r = set.join_next(), if !set.is_empty() => collect(r, &mut done)?,
                    r = followers.join_next(), if !followers.is_empty() => {
                        collect(r, &mut discard)?;
                    }
                    () = tokio::time::sleep(POLL) => {}
                }
                if followed.since_progress() > STALL + Duration::from_secs(5) {
                    anyhow::bail!(
                        "the consumers received {} of {warmup} warm-up records, then nothing for {STALL:?}",
                        followed.received.load(Ordering::SeqCst)
                    );
                }
            }
            anyhow::ensure!(
                followed.received.load(Ordering::SeqCst) == warmup,
                "the consumers received {} warm-up records, {warmup} were sent",
                followed.received.load(Ordering::SeqCst)
            );
        }
    }
    let start = Start::now();
    tx.send_replace(Some(start));
    finish(&mut set, &mut done).await?;
    Ok(Measured::merge(start.at, &done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive::Record;
    use crate::drive::tests::workload;

    /// A fake system: producers count, paced sends are checked against the schedule.
    #[derive(Debug, Default)]
    struct Counting {
        requests: Vec<usize>,
    }

    impl Sender for Counting {
        async fn send(&mut self, records: Vec<Record>) -> anyhow::Result<()> {
            self.requests.push(records.len());
            Ok(())
        }
    }

    #[tokio::test]
    async fn max_rate_sends_full_batches_and_counts_partitions() {
        let w = workload("produce-1k-keyed-4p");
        let mut sender = Counting::default();
        let mut counts = vec![0; 4];
        let mut latency = Latency::new();
        send_phase(
            &mut sender,
            &mut Source::new(&w, 0),
            2_500,
            1_000,
            None,
            Start::now(),
            Some(&mut latency),
            &mut counts,
        )
        .await
        .unwrap();
        assert_eq!(sender.requests, vec![1_000, 1_000, 500]);
        assert_eq!(counts.iter().sum::<u64>(), 2_500);
        assert!(counts.iter().all(|&c| c > 400));
        assert!(latency.summary().max > 0.0);
    }

    #[tokio::test]
    async fn paced_sends_take_what_is_due() {
        let w = workload("e2e-1k-rate");
        let mut sender = Counting::default();
        let mut counts = vec![0; 1];
        let pace = Pace::new(20_000, 1).unwrap();
        let began = Instant::now();
        send_phase(
            &mut sender,
            &mut Source::new(&w, 0),
            2_000,
            100,
            Some(pace),
            Start::now(),
            None,
            &mut counts,
        )
        .await
        .unwrap();
        // 2 000 records at 20 000/s: the last is due after 99.95 ms.
        assert!(began.elapsed() >= Duration::from_micros(99_950));
        assert_eq!(sender.requests.iter().sum::<usize>(), 2_000);
        assert!(sender.requests.iter().all(|&n| (1..=100).contains(&n)));
        assert_eq!(counts, vec![2_000]);
    }

    #[tokio::test]
    async fn late_records_are_charged_from_their_due_time() {
        let w = workload("e2e-1k-rate");
        let mut sender = Counting::default();
        let mut latency = Latency::new();
        // Started 1 s ago: all 100 records are overdue; one request takes them all.
        let start = Start {
            at: Instant::now() - Duration::from_secs(1),
            epoch_us: now_us() - 1_000_000,
        };
        send_phase(
            &mut sender,
            &mut Source::new(&w, 0),
            100,
            1_000,
            Some(Pace::new(1_000, 1).unwrap()),
            start,
            Some(&mut latency),
            &mut [0],
        )
        .await
        .unwrap();
        assert_eq!(sender.requests, vec![100]);
        let s = latency.summary();
        // Record 0 was due 1 s ago, record 99 at 0.901 s ago.
        assert!(s.max >= 999_000.0 && s.p50 >= 940_000.0, "{s:?}");
    }
}
