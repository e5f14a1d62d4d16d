//! The SDK's consumer-group members, over both transports (the real `rill` binary on a
//! free port, `tcp::*`, and an in-process broker, `embedded::*`): long polling,
//! rebalancing while a long poll waits, back-off after a failed poll, joining only an
//! existing group, deleting a group's offset; and `rill consume --group G --member ID`
//! with the real binary.

#[macro_use]
mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rill_client::{Client, ClientError, CommitPolicy, ErrorCode, Record, StartAt, Topic};

over_both_transports!(
    an_idle_member_waits_on_the_broker_instead_of_polling_it,
    a_record_published_while_a_member_waits_reaches_it,
    a_partition_assigned_while_a_member_waits_is_read_at_once,
    a_revoked_partition_moves_while_its_long_poll_waits_and_its_answer_is_dropped,
    a_failed_poll_is_retried_after_the_polling_retry_interval,
    a_member_that_must_not_create_its_group_finds_only_an_existing_one,
    group_offsets_are_deleted_by_their_owner_or_by_an_admin_of_an_empty_group,
    a_member_is_a_stream_of_records,
    a_held_revoked_partition_moves_only_when_released,
    a_member_reports_numbers_the_group_description_shows,
);

async fn topic(client: &Client, name: &str, partitions: u32) -> Topic {
    let t = client.stream("sdkg").topic(name);
    t.ensure(partitions).await.unwrap();
    t
}

/// Waits up to 20 s for `done`, checking every 20 ms.
async fn wait_until<F: Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let started = Instant::now();
    while !done().await {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether each of `members` owns one partition and no revocation is pending.
async fn settled(t: &Topic, group: &str, members: usize) -> bool {
    match t.describe_group(group).await {
        Ok(d) => {
            d.members.len() == members
                && d.partitions.iter().all(|p| p.owner.is_some())
                && d.members.iter().all(|m| m.revoking.is_empty())
        }
        Err(_) => false,
    }
}

fn value(r: &Record) -> String {
    String::from_utf8(r.value.to_vec()).unwrap()
}

/// An idle member sends about one fetch per partition per `max_wait` (1 s by default),
/// each waiting on the broker, instead of a zero-wait fetch every `poll_interval`
/// (100 ms: about 60 fetches here). Over TCP it sends none: each partition's
/// subscription, opened once, stays open while nothing comes (docs/STREAMING.md §7).
async fn an_idle_member_waits_on_the_broker_instead_of_polling_it(client: &Client) {
    let t = topic(client, "idle", 2).await;
    let mut member = t.consumer_group("g").build().await.unwrap();
    assert_eq!(member.assignment(), vec![0, 1]);
    let before = client.requests_sent("Fetch");
    let subscribes = client.requests_sent("Subscribe");
    let err = member
        .next_within(Duration::from_secs(3))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Timeout(_)), "{err}");
    let fetches = client.requests_sent("Fetch") - before;
    let subscribes = client.requests_sent("Subscribe") - subscribes;
    // One Subscribe per partition: answered `None` embedded, then held open over TCP.
    assert_eq!(subscribes, 2, "{subscribes} subscriptions for 2 partitions");
    if client.is_embedded() {
        // 2 partitions × (3 s / 1 s + 1), with room for a slow machine.
        assert!(
            (2..=12).contains(&fetches),
            "{fetches} fetches in 3 s by an idle member of 2 partitions"
        );
    } else {
        assert_eq!(fetches, 0, "read by push");
    }
    member.shutdown().await.unwrap();
}

/// A record published while the member waits reaches it from the waiting fetch: the
/// member does not sleep between polls (here `poll_interval` is 60 s, which applies only
/// without long polling).
async fn a_record_published_while_a_member_waits_reaches_it(client: &Client) {
    let t = topic(client, "wake", 1).await;
    let mut member = t
        .consumer_group("g")
        .poll_interval(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let r = member.next_within(Duration::from_secs(20)).await;
        (member, r)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    t.publish().value("late").send().await.unwrap();
    let (mut member, r) = waiting.await.unwrap();
    assert_eq!(value(&r.unwrap()), "late");
    member.shutdown().await.unwrap();
}

/// A member waiting with no partitions starts reading one as soon as it is assigned
/// (instead of after its next `poll_interval`, here 60 s).
async fn a_partition_assigned_while_a_member_waits_is_read_at_once(client: &Client) {
    let t = topic(client, "assigned", 1).await;
    let mut a = t.consumer_group("g").member_id("a").build().await.unwrap();
    let mut b = t
        .consumer_group("g")
        .member_id("b")
        .poll_interval(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    assert!(b.assignment().is_empty());
    let waiting = tokio::spawn(async move {
        let r = b.next_within(Duration::from_secs(20)).await;
        (b, r)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.shutdown().await.unwrap();
    wait_until("b to own the partition", || async {
        t.describe_group("g").await.unwrap().partitions[0]
            .owner
            .as_deref()
            == Some("b")
    })
    .await;
    t.publish().value("for-b").send().await.unwrap();
    let (mut b, r) = waiting.await.unwrap();
    assert_eq!(value(&r.unwrap()), "for-b");
    b.shutdown().await.unwrap();
}

/// A member waits on both its partitions with 60 s long polls when a second member
/// joins: the partition it must give up moves at once (not when the long poll ends), and
/// the record published there afterwards reaches only the new owner — the old owner's
/// fetch is dropped with the partition, and nothing it held moves that partition's
/// offset.
async fn a_revoked_partition_moves_while_its_long_poll_waits_and_its_answer_is_dropped(
    client: &Client,
) {
    let t = topic(client, "revoke", 2).await;
    let mut a = t
        .consumer_group("g")
        .member_id("a")
        .max_wait(Duration::from_secs(60))
        .commit_policy(CommitPolicy::Each)
        .build()
        .await
        .unwrap();
    assert_eq!(a.assignment(), vec![0, 1]);
    let stop = Arc::new(AtomicBool::new(false));
    let stop_a = Arc::clone(&stop);
    let reading_a = tokio::spawn(async move {
        let mut got = Vec::new();
        while !stop_a.load(Ordering::Relaxed) {
            match a.next_within(Duration::from_millis(200)).await {
                Ok(r) => got.push(r),
                Err(ClientError::Timeout(_)) => {}
                Err(e) => panic!("member a: {e}"),
            }
        }
        (a, got)
    });
    // Both long polls of `a` are waiting now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut b = t
        .consumer_group("g")
        .member_id("b")
        .commit_policy(CommitPolicy::Each)
        .build()
        .await
        .unwrap();
    wait_until("the partition to move to b", || settled(&t, "g", 2)).await;
    wait_until("b to take it up", || {
        let taken = !b.assignment().is_empty();
        async move { taken }
    })
    .await;
    let moved = b.assignment();
    assert_eq!(moved.len(), 1, "{moved:?}");
    let (moved, kept) = (moved[0], 1 - moved[0]);
    t.publish()
        .value("to-b")
        .partition(moved)
        .send()
        .await
        .unwrap();
    t.publish()
        .value("to-a")
        .partition(kept)
        .send()
        .await
        .unwrap();
    let r = b.next_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!((r.partition, value(&r)), (moved, "to-b".to_owned()));
    wait_until("a to read its record", || async {
        t.describe_group("g").await.unwrap().partitions[kept as usize].stored_offset == Some(1)
    })
    .await;
    // Let a late answer of the dropped long poll arrive, if it were to.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut a, got) = reading_a.await.unwrap();
    let got: Vec<(u32, String)> = got.iter().map(|r| (r.partition, value(r))).collect();
    assert_eq!(got, vec![(kept, "to-a".to_owned())]);
    assert_eq!(a.last_consumed_offset(moved), None);
    // `b` stores the moved partition once it asks for its next record (or shuts down).
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
    let d = t.describe_group("g").await.unwrap();
    assert_eq!(d.partitions[moved as usize].stored_offset, Some(1), "{d:?}");
}

/// A poll that fails is returned by `next`, and the partition is polled again only after
/// `polling_retry_interval`, so a caller that goes on after errors does not spin.
async fn a_failed_poll_is_retried_after_the_polling_retry_interval(client: &Client) {
    let t = topic(client, "retry", 1).await;
    let zero = t
        .consumer_group("g")
        .polling_retry_interval(Duration::ZERO)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(zero, ClientError::InvalidArgument(_)), "{zero}");
    // Starting beyond the end of the (empty) partition: every fetch fails.
    let mut member = t
        .consumer_group("g")
        .start_at(StartAt::Offset(1000))
        .polling_retry_interval(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let before = client.requests_sent("Fetch");
    let started = Instant::now();
    let mut errors = 0u64;
    while started.elapsed() < Duration::from_millis(1500) {
        let err = member
            .next_within(Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::OffsetBeyondEnd), "{err}");
        errors += 1;
    }
    let fetches = client.requests_sent("Fetch") - before;
    // 1.5 s / 300 ms + the first, with room for a slow machine.
    assert!((2..=8).contains(&errors), "{errors} failed polls in 1.5 s");
    assert!(
        fetches <= errors + 1,
        "{fetches} fetches for {errors} errors"
    );
    member.shutdown().await.unwrap();
}

/// `create_group(false)`: a group that does not exist (no member, no stored offset) is a
/// `GROUP_NOT_FOUND` error instead of a new group; one with a stored offset is joined.
async fn a_member_that_must_not_create_its_group_finds_only_an_existing_one(client: &Client) {
    let t = topic(client, "exists", 1).await;
    t.publish().value("v0").send().await.unwrap();
    let err = t
        .consumer_group("typo")
        .create_group(false)
        .build()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::GroupNotFound), "{err}");
    assert!(t.describe_group("typo").await.is_err(), "not created");
    let mut first = t
        .consumer_group("g")
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    // A live member makes it exist.
    let mut second = t
        .consumer_group("g")
        .create_group(false)
        .build()
        .await
        .unwrap();
    second.shutdown().await.unwrap();
    let r = first.next_within(Duration::from_secs(10)).await.unwrap();
    first.commit(&r).await.unwrap();
    first.shutdown().await.unwrap();
    // No members left, but a stored offset: it still exists, and the member resumes.
    let mut again = t
        .consumer_group("g")
        .create_group(false)
        .build()
        .await
        .unwrap();
    t.publish().value("v1").send().await.unwrap();
    let r = again.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(value(&r), "v1");
    again.shutdown().await.unwrap();
}

/// A member deletes the stored offset of a partition it owns (fenced: others are
/// refused), and the partition's next owner starts at its `start_at`; an admin deletes
/// one only while the group has no members.
async fn group_offsets_are_deleted_by_their_owner_or_by_an_admin_of_an_empty_group(
    client: &Client,
) {
    let t = topic(client, "delete", 1).await;
    for i in 0..5 {
        t.publish().value(format!("v{i}")).send().await.unwrap();
    }
    let mut a = t
        .consumer_group("g")
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    let mut last = None;
    for _ in 0..3 {
        last = Some(a.next_within(Duration::from_secs(10)).await.unwrap());
    }
    a.commit(&last.unwrap()).await.unwrap();
    let stored = |d: rill_client::GroupDescription| d.partitions[0].stored_offset;
    assert_eq!(stored(t.describe_group("g").await.unwrap()), Some(3));
    let mut b = t
        .consumer_group("g")
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    assert!(b.assignment().is_empty());
    let err = b.delete_offset(0).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotAssigned), "{err}");
    a.delete_offset(0).await.unwrap();
    assert_eq!(a.last_stored_offset(0), None);
    assert_eq!(stored(t.describe_group("g").await.unwrap()), None);
    // The next owner starts at its start_at (First), not after what `a` read.
    a.shutdown().await.unwrap();
    let r = b.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.offset, 0);
    b.commit(&r).await.unwrap();
    // An admin delete while a member lives is refused; once the group is empty it goes.
    let err = t.delete_group_offset("g", 0).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::GroupNotEmpty), "{err}");
    b.shutdown().await.unwrap();
    assert!(t.delete_group_offset("g", 0).await.unwrap());
    let err = t.delete_group_offset("g", 0).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::GroupNotFound), "{err}");
}

/// `into_stream`: the member's records as a `Stream`, with long polling underneath (a
/// record published while the stream waits arrives).
async fn a_member_is_a_stream_of_records(client: &Client) {
    let t = topic(client, "stream", 2).await;
    for i in 0..4 {
        t.publish()
            .value(format!("v{i}"))
            .partition(i % 2)
            .send()
            .await
            .unwrap();
    }
    let member = t.consumer_group("g").build().await.unwrap();
    let mut stream = Box::pin(member.into_stream());
    let mut got = Vec::new();
    for _ in 0..4 {
        let r = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        got.push(value(&r));
    }
    got.sort();
    assert_eq!(got, vec!["v0", "v1", "v2", "v3"]);
    let next = tokio::spawn(async move {
        let r = tokio::time::timeout(Duration::from_secs(20), stream.next()).await;
        r.unwrap().unwrap().unwrap()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.publish().value("late").partition(1).send().await.unwrap();
    assert_eq!(value(&next.await.unwrap()), "late");
}

/// `rill consume --group G --member ID` joins with that member id; a bad id, or one
/// without `--group`, is a usage error (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_consume_joins_a_group_with_the_member_id_given() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"));
    let client = Client::connect(&server.url()).await.unwrap();
    let t = topic(&client, "cli", 2).await;
    t.publish().value("hello").send().await.unwrap();
    let mut child = Command::new(common::rill_bin())
        .args(["--server", &server.url(), "consume", "sdkg/cli"])
        .args(["--group", "g", "--member", "alice", "--follow"])
        .env("RILL_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("alice to join", || async {
        t.describe_group("g")
            .await
            .is_ok_and(|d| d.members.iter().map(|m| m.id.as_str()).collect::<Vec<_>>() == ["alice"])
    })
    .await;
    let d = t.describe_group("g").await.unwrap();
    assert!(
        d.partitions
            .iter()
            .all(|p| p.owner.as_deref() == Some("alice")),
        "{d:?}"
    );
    // It stores the offset after printing and flushing the record (once quiet).
    wait_until("alice to store what it printed", || async {
        t.describe_group("g")
            .await
            .is_ok_and(|d| d.partitions.iter().any(|p| p.stored_offset == Some(1)))
    })
    .await;
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hello");
    for bad in [
        &["--group", "g", "--member", "has space"][..],
        &["--group", "g", "--member", ".."],
        &["--member", "alice"],
    ] {
        let out = Command::new(common::rill_bin())
            .args(["--server", &server.url(), "consume", "sdkg/cli"])
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("member"),
            "{bad:?}: {out:?}"
        );
    }
}

/// With `hold_revoked`, a partition the broker revokes stays with its member (which may
/// still store its offset) until `release`: only then does the next member get it.
async fn a_held_revoked_partition_moves_only_when_released(client: &Client) {
    let t = topic(client, "held", 2).await;
    for i in 0..4 {
        t.publish()
            .value(format!("v{i}"))
            .partition(i % 2)
            .send()
            .await
            .unwrap();
    }
    let revoked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&revoked);
    let a = t
        .consumer_group("g")
        .member_id("a")
        .commit_policy(CommitPolicy::Disabled)
        .hold_revoked(true)
        .on_revoked(move |ps| seen.lock().unwrap().extend_from_slice(ps))
        .build()
        .await
        .unwrap();
    assert_eq!(a.assignment(), [0, 1]);
    assert_eq!(a.position(0), Some(0));
    let b = t.consumer_group("g").member_id("b").build().await.unwrap();
    let start = Instant::now();
    while revoked.lock().unwrap().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a was never asked to give a partition up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let moving = revoked.lock().unwrap()[0];
    // Held: b does not get it, and a may still store its offset.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        b.assignment().is_empty(),
        "b got {:?} before a released it",
        b.assignment()
    );
    a.store_offset(rill_client::Position::new(moving, 1))
        .await
        .unwrap();
    a.release(&[moving]).unwrap();
    let start = Instant::now();
    while b.assignment() != [moving] {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "b never got {moving}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(b.position(moving), Some(2), "b starts after a's last store");
    let (mut a, mut b) = (a, b);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// `report` sends its numbers with the heartbeats and the group's description shows
/// them in name order; a bad report is refused at once and changes nothing.
async fn a_member_reports_numbers_the_group_description_shows(client: &Client) {
    let t = topic(client, "reports", 1).await;
    let mut a = t.consumer_group("g").member_id("a").build().await.unwrap();
    a.report([("zeta", 2), ("alpha", 1)]).unwrap();
    let long = "x".repeat(rill_client::MEMBER_METRIC_NAME_MAX + 1);
    let many: Vec<(String, u64)> = (0..=rill_client::MEMBER_METRICS_MAX)
        .map(|i| (format!("n{i}"), 0))
        .collect();
    for bad in [
        vec![("Upper".to_owned(), 1)],
        vec![(String::new(), 1)],
        vec![(long, 1)],
        vec![("twice".to_owned(), 1), ("twice".to_owned(), 2)],
        many,
    ] {
        assert!(
            matches!(a.report(bad.clone()), Err(ClientError::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    let start = Instant::now();
    loop {
        let d = t.describe_group("g").await.unwrap();
        let m = &d.members[0];
        if !m.metrics.is_empty() {
            assert_eq!(
                m.metrics,
                [("alpha".to_owned(), 1), ("zeta".to_owned(), 2)],
                "the last good report, in name order"
            );
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never reported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.shutdown().await.unwrap();
}
