//! `try_next()` on readers, named consumers and group members hands out what is
//! fetched already without waiting, exactly as `next()` would: the same records in the
//! same order, the same positions, and under every commit policy the same offsets
//! stored at the same points; over both transports.

#[macro_use]
mod common;

use std::collections::BTreeSet;

use rill_client::{Client, CommitPolicy, Record, StartAt, Topic};

const RECORDS: u64 = 23;
/// Smaller than `RECORDS` and not a divisor of it: polls end mid-way and at the end.
const BATCH: u32 = 4;

over_both_transports!(
    readers_hand_out_the_same_records_either_way,
    named_consumers_store_at_the_same_points_either_way,
    group_members_store_at_the_same_points_either_way,
);

/// The deterministic policies (the interval ones depend on the clock).
fn policies() -> Vec<CommitPolicy> {
    vec![
        CommitPolicy::Disabled,
        CommitPolicy::Polling,
        CommitPolicy::All,
        CommitPolicy::Each,
        CommitPolicy::Every(3),
    ]
}

/// Whether some records come from `try_next`: not under `Each`, which stores before
/// every record after the first (a store needs `next()`).
fn expect_buffered(policy: CommitPolicy, prefer_buffered: bool) -> bool {
    prefer_buffered && policy != CommitPolicy::Each
}

async fn topic(client: &Client, name: &str, partitions: u32) -> Topic {
    let t = client.stream("try-next").topic(name);
    t.ensure(partitions).await.unwrap();
    for i in 0..RECORDS {
        let p = (i % u64::from(partitions)) as u32;
        t.publish()
            .partition(p)
            .value(format!("v{i}"))
            .send()
            .await
            .unwrap();
    }
    t
}

async fn readers_hand_out_the_same_records_either_way(client: &Client) {
    let t = topic(client, "reader", 3).await;
    let read = |prefer_buffered: bool| {
        let t = t.clone();
        async move {
            let mut reader = t.records("r").max_bytes(200);
            let mut seen = Vec::new();
            let mut buffered = 0;
            loop {
                let next = match prefer_buffered.then(|| reader.try_next()).flatten() {
                    Some(r) => {
                        buffered += 1;
                        Some(r)
                    }
                    None => reader.next().await,
                };
                let Some(r) = next else { break };
                let r = r.unwrap();
                seen.push((r.partition, r.offset, r.value, reader.offsets()));
            }
            (seen, buffered)
        }
    };
    let (awaited, none) = read(false).await;
    let (mixed, buffered) = read(true).await;
    assert_eq!(none, 0);
    assert_eq!(awaited.len() as u64, RECORDS);
    assert_eq!(mixed, awaited);
    assert!(
        buffered > 0,
        "small fetches of several records: some come from the buffer"
    );
    // Caught up: nothing buffered, and `next` says so.
    let mut reader = t.records("r2");
    assert!(reader.try_next().is_none(), "nothing fetched before next()");
    while reader.next().await.is_some() {}
    assert!(reader.try_next().is_none());
}

/// What a consumer does after handing out each record: (partition, offset, the offset
/// it knows stored for that partition).
type Trace = Vec<(u32, u64, Option<u64>)>;

async fn named_consumers_store_at_the_same_points_either_way(client: &Client) {
    let t = topic(client, "named", 1).await;
    for (i, policy) in policies().into_iter().enumerate() {
        let mut traces = Vec::new();
        for prefer_buffered in [false, true] {
            let name = format!("policy-{i}-{prefer_buffered}");
            let mut c = t
                .consumer(&name, 0)
                .batch_length(BATCH)
                .commit_policy(policy)
                .start_at(StartAt::First)
                .build()
                .await
                .unwrap();
            let mut trace = Trace::new();
            let mut buffered = 0;
            while (trace.len() as u64) < RECORDS {
                let r: Record = match prefer_buffered.then(|| c.try_next()).flatten() {
                    Some(r) => {
                        buffered += 1;
                        r
                    }
                    None => c.next().await.unwrap().unwrap(),
                };
                trace.push((r.partition, r.offset, c.last_stored_offset(0)));
            }
            c.shutdown().await.unwrap();
            assert!(c.try_next().is_none(), "nothing after shutdown");
            assert_eq!(
                buffered > 0,
                expect_buffered(policy, prefer_buffered),
                "{policy:?}"
            );
            traces.push((trace, c.last_stored_offset(0)));
        }
        assert_eq!(traces[0], traces[1], "{policy:?}");
        let offsets: Vec<u64> = traces[0].0.iter().map(|&(_, o, _)| o).collect();
        assert_eq!(offsets, (0..RECORDS).collect::<Vec<_>>(), "{policy:?}");
        assert_poll_results(policy, &traces[0].0);
    }
}

/// One fetch brings every record (they are small), yet poll results are `BATCH`
/// records: `All` and `Polling` store the poll result before when the record after it
/// is asked for.
fn assert_poll_results(policy: CommitPolicy, trace: &Trace) {
    if !matches!(policy, CommitPolicy::All | CommitPolicy::Polling) {
        return;
    }
    let batch = u64::from(BATCH);
    for &(_, offset, stored) in trace {
        let expected = (offset / batch * batch).checked_sub(1);
        assert_eq!(stored, expected, "{policy:?} when {offset} was handed out");
    }
}

async fn group_members_store_at_the_same_points_either_way(client: &Client) {
    // One partition: the order of records and polls does not depend on timing.
    let t = topic(client, "group", 1).await;
    for (i, policy) in policies().into_iter().enumerate() {
        let mut traces = Vec::new();
        for prefer_buffered in [false, true] {
            let (trace, buffered, stored) = consume_group(
                &t,
                &format!("policy-{i}-{prefer_buffered}"),
                policy,
                prefer_buffered,
            )
            .await;
            assert_eq!(
                buffered > 0,
                expect_buffered(policy, prefer_buffered),
                "{policy:?}"
            );
            traces.push((trace, stored));
        }
        assert_eq!(traces[0], traces[1], "{policy:?}");
        assert_poll_results(policy, &traces[0].0);
    }
    // Several partitions: every record exactly once either way.
    let t = topic(client, "group-3", 3).await;
    for prefer_buffered in [false, true] {
        let (trace, _, _) = consume_group(
            &t,
            &format!("three-{prefer_buffered}"),
            CommitPolicy::Each,
            prefer_buffered,
        )
        .await;
        let seen: BTreeSet<(u32, u64)> = trace.iter().map(|&(p, o, _)| (p, o)).collect();
        assert_eq!(seen.len() as u64, RECORDS, "no record twice, none missing");
        for p in 0..3u32 {
            let mut offsets = trace.iter().filter(|x| x.0 == p).map(|x| x.1);
            assert!(
                offsets.by_ref().eq(0..offsets_in(p, 3)),
                "partition {p} in order"
            );
        }
    }
}

fn offsets_in(partition: u32, partitions: u32) -> u64 {
    (0..RECORDS)
        .filter(|i| (i % u64::from(partitions)) as u32 == partition)
        .count() as u64
}

/// Reads every record of `t` as the one member of `group`; returns the trace, how many
/// came from `try_next`, and what is stored for partition 0 after shutdown.
async fn consume_group(
    t: &Topic,
    group: &str,
    policy: CommitPolicy,
    prefer_buffered: bool,
) -> (Trace, usize, Option<u64>) {
    let mut c = t
        .consumer_group(group)
        .batch_length(BATCH)
        .commit_policy(policy)
        .start_at(StartAt::First)
        .build()
        .await
        .unwrap();
    assert!(
        c.try_next().is_none(),
        "nothing fetched before the member asked"
    );
    let mut trace = Trace::new();
    let mut buffered = 0;
    while (trace.len() as u64) < RECORDS {
        let r: Record = match prefer_buffered.then(|| c.try_next()).flatten() {
            Some(r) => {
                buffered += 1;
                r
            }
            None => c.next().await.unwrap().unwrap(),
        };
        let stored = c.last_stored_offset(r.partition);
        trace.push((r.partition, r.offset, stored));
    }
    c.shutdown().await.unwrap();
    assert!(c.try_next().is_none(), "nothing after shutdown");
    let stored = c.last_stored_offset(0);
    (trace, buffered, stored)
}
