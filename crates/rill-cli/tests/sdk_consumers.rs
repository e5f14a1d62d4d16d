//! Where named consumers and group members start: `start_at` applies only where no
//! offset is stored, unless `allow_replay()`; every `StartAt` variant, with and without
//! a stored offset, for both consumer kinds, over both transports.

#[macro_use]
mod common;

use std::time::Duration;

use rill_client::{Client, CommitPolicy, Position, StartAt, Topic};

const RECORDS: u64 = 10;
/// The stored offset of the cases that have one: records 0..=4 were consumed.
const CONSUMED: u64 = 4;

over_both_transports!(
    named_consumers_start_where_the_stored_offset_says,
    group_members_start_where_the_stored_offset_says,
    starting_at_the_end_reads_only_what_comes_after,
);

/// A one-partition topic of `RECORDS` records; returns it and a timestamp that selects
/// the first record at or after it (its offset).
async fn topic(client: &Client, name: &str) -> (Topic, i64, u64) {
    let t = client.stream("starts").topic(name);
    t.ensure(1).await.unwrap();
    for i in 0..RECORDS {
        t.publish().value(format!("v{i}")).send().await.unwrap();
    }
    let all = t
        .fetch(Position::new(0, 0), 1 << 20, Duration::ZERO)
        .await
        .unwrap()
        .records;
    let ts = all[7].timestamp_us;
    let at = all.iter().position(|r| r.timestamp_us >= ts).unwrap() as u64;
    (t, ts, at)
}

/// Each case: where `start` begins without a stored offset, and with one when replay
/// is allowed (without replay, a stored offset always wins: `CONSUMED + 1`).
fn cases(ts: i64, at: u64) -> Vec<(StartAt, u64, u64)> {
    vec![
        (StartAt::First, 0, 0),
        (StartAt::Last, RECORDS - 1, RECORDS - 1),
        (StartAt::Next, 0, CONSUMED + 1),
        // Above the stored offset: without replay it would skip records 5 and 6.
        (StartAt::Offset(7), 7, 7),
        // Below it: without replay it would read records 2-4 again.
        (StartAt::Offset(2), 2, 2),
        (StartAt::TimestampMicros(ts), at, at),
    ]
}

async fn named_consumers_start_where_the_stored_offset_says(client: &Client) {
    let (t, ts, at) = topic(client, "named").await;
    for (i, (start, fresh, replayed)) in cases(ts, at).into_iter().enumerate() {
        // Nothing stored: `start_at` decides, with or without replay.
        for replay in [false, true] {
            let name = format!("fresh-{i}-{replay}");
            assert_eq!(
                first_named(&t, &name, start, replay).await,
                fresh,
                "{start:?} fresh"
            );
        }
        // Stored: the stored offset wins without replay.
        let name = format!("stored-{i}");
        store_named(&t, &name).await;
        assert_eq!(
            first_named(&t, &name, start, false).await,
            CONSUMED + 1,
            "{start:?} over a stored offset, no replay"
        );
        assert_eq!(
            first_named(&t, &name, start, true).await,
            replayed,
            "{start:?} over a stored offset, replay"
        );
    }
}

async fn store_named(t: &Topic, name: &str) {
    let mut c = t
        .consumer(name, 0)
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    c.store_offset(Position::new(0, CONSUMED)).await.unwrap();
    assert_eq!(c.last_stored_offset(0), Some(CONSUMED));
}

async fn first_named(t: &Topic, name: &str, start: StartAt, replay: bool) -> u64 {
    let mut b = t
        .consumer(name, 0)
        .start_at(start)
        .commit_policy(CommitPolicy::Disabled);
    if replay {
        b = b.allow_replay();
    }
    let mut c = b.build().await.unwrap();
    c.next_within(Duration::from_secs(10)).await.unwrap().offset
}

async fn group_members_start_where_the_stored_offset_says(client: &Client) {
    let (t, ts, at) = topic(client, "group").await;
    for (i, (start, fresh, replayed)) in cases(ts, at).into_iter().enumerate() {
        for replay in [false, true] {
            let group = format!("fresh-{i}-{replay}");
            assert_eq!(
                first_member(&t, &group, start, replay).await,
                fresh,
                "{start:?} fresh"
            );
        }
        let group = format!("stored-{i}");
        store_group(&t, &group).await;
        assert_eq!(
            first_member(&t, &group, start, false).await,
            CONSUMED + 1,
            "{start:?} over a stored offset, no replay"
        );
        assert_eq!(
            first_member(&t, &group, start, true).await,
            replayed,
            "{start:?} over a stored offset, replay"
        );
    }
}

async fn store_group(t: &Topic, group: &str) {
    let mut m = t
        .consumer_group(group)
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    m.store_offset(Position::new(0, CONSUMED)).await.unwrap();
    m.shutdown().await.unwrap();
    let d = t.describe_group(group).await.unwrap();
    assert_eq!(d.partitions[0].stored_offset, Some(CONSUMED + 1), "{d:?}");
}

async fn first_member(t: &Topic, group: &str, start: StartAt, replay: bool) -> u64 {
    let mut b = t
        .consumer_group(group)
        .start_at(start)
        .commit_policy(CommitPolicy::Disabled);
    if replay {
        b = b.allow_replay();
    }
    let mut m = b.build().await.unwrap();
    let first = m.next_within(Duration::from_secs(10)).await.unwrap().offset;
    m.shutdown().await.unwrap();
    first
}

/// `StartAt::End`: a named consumer or a group member reads only the records appended
/// after its start was resolved; a stored offset still wins unless replay is allowed.
async fn starting_at_the_end_reads_only_what_comes_after(client: &Client) {
    let (t, _, _) = topic(client, "end").await;
    let mut c = t
        .consumer("from-end", 0)
        .start_at(StartAt::End)
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    t.publish().value("late").send().await.unwrap();
    let first = c.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!((first.offset, &first.value[..]), (RECORDS, &b"late"[..]));

    store_named(&t, "stored-end").await;
    let end = t.end_offset(0).await.unwrap();
    assert_eq!(
        first_named(&t, "stored-end", StartAt::End, false).await,
        CONSUMED + 1
    );
    let mut replayed = t
        .consumer("stored-end", 0)
        .start_at(StartAt::End)
        .allow_replay()
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    t.publish().value("later").send().await.unwrap();
    let first = replayed.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        first.offset, end,
        "replay from the end skips what was stored before"
    );

    let mut m = t
        .consumer_group("from-end")
        .start_at(StartAt::End)
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    // The member resolves its start when it is given the partition: publish after that.
    let end = t.end_offset(0).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while m.position(0) != Some(end) {
        assert!(
            std::time::Instant::now() < deadline,
            "no partition: {:?}",
            m.assignment()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t.publish().value("latest").send().await.unwrap();
    let first = m.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!((first.offset, &first.value[..]), (end, &b"latest"[..]));
    m.shutdown().await.unwrap();
}
