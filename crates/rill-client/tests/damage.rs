//! Reading through damaged data with an embedded broker: a sealed segment that lost its
//! end (the broker reports DATA_LOSS) and a batch whose body no longer matches its CRC
//! (the broker serves it; the client finds it). Readers, named consumers and group
//! members return each loss once, naming its range, deliver every intact record and end.
//!
//! Issue 9: these readers used to return the same error forever.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rill_client::{Client, ClientError, CommitPolicy, Position, StartAt, Topic, TopicOptions};

const RECORDS: u64 = 20;

fn value(i: u64) -> String {
    format!("{i:03}{}", "x".repeat(200))
}

fn segment_logs(data: &Path) -> Vec<PathBuf> {
    let part = data.join("streams/s/t/0");
    let mut logs: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

fn base_offset(log: &Path) -> u64 {
    log.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// Writes 20 one-record batches into segments of three, closes the broker, then cuts
/// the end of the first segment and flips the last byte of the third. Returns the
/// offset of the batch whose body was flipped.
async fn damaged_data_dir(data: &Path) -> u64 {
    let client = Client::open(data).await.unwrap();
    let t = client.stream("s").topic("t");
    t.create_with(
        &TopicOptions {
            partitions: Some(1),
            segment_bytes: Some(1024),
            ..Default::default()
        },
        false,
    )
    .await
    .unwrap();
    for i in 0..RECORDS {
        t.publish().value(value(i)).send().await.unwrap();
    }
    client.close().await.unwrap();
    let logs = segment_logs(data);
    assert!(logs.len() >= 5, "{logs:?}");
    let len = std::fs::metadata(&logs[0]).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&logs[0])
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let mut bytes = std::fs::read(&logs[2]).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    std::fs::write(&logs[2], bytes).unwrap();
    base_offset(&logs[3]) - 1
}

/// What a read through the damage saw: intact records' offsets, and the losses.
#[derive(Debug, Default)]
struct Seen {
    offsets: Vec<u64>,
    lost: Vec<(u64, Option<u64>, &'static str)>,
}

impl Seen {
    fn take(&mut self, item: Result<rill_client::Record, ClientError>) {
        match item {
            Ok(r) => {
                assert_eq!(&r.value[..], value(r.offset).as_bytes());
                self.offsets.push(r.offset);
            }
            Err(e) => {
                let (partition, from, to) = e.lost_range().unwrap_or_else(|| panic!("{e}"));
                assert_eq!(partition, 0);
                let kind = match e {
                    ClientError::DataLoss { .. } => "data loss",
                    ClientError::Corrupt { .. } => "corrupt",
                    other => panic!("{other}"),
                };
                self.lost.push((from, to, kind));
            }
        }
    }

    /// Every record outside the two ranges, each once, and each range reported once.
    fn check(&self, lost: (u64, u64), corrupt: u64) {
        assert_eq!(
            self.lost,
            vec![
                (lost.0, Some(lost.1), "data loss"),
                (corrupt, Some(corrupt + 1), "corrupt"),
            ],
            "{self:?}"
        );
        let expected: Vec<u64> = (0..RECORDS)
            .filter(|o| !(lost.0..lost.1).contains(o) && *o != corrupt)
            .collect();
        assert_eq!(self.offsets, expected, "{self:?}");
    }
}

/// The damaged range the broker reports for the cut segment.
async fn reported_loss(t: &Topic) -> (u64, u64) {
    let d = t.describe().await.unwrap();
    let p = &d.partitions[0];
    assert!(p.failure.is_some(), "the partition refuses appends");
    assert_eq!(p.damaged.len(), 1, "{:?}", p.damaged);
    let r = &p.damaged[0];
    (r.from, r.to.expect("an end: the next segment"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_consumers_report_each_loss_once_and_read_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let corrupt = damaged_data_dir(&data).await;
    let client = Client::open(&data).await.unwrap();
    let t = client.stream("s").topic("t");
    let lost = reported_loss(&t).await;
    assert!(lost.1 <= corrupt, "{lost:?} {corrupt}");

    // A cursor reader ends once it has read past both.
    let mut reader = t.records("r");
    let mut seen = Seen::default();
    for _ in 0..100 {
        match reader.next().await {
            Some(item) => seen.take(item),
            None => break,
        }
    }
    seen.check(lost, corrupt);
    assert_eq!(reader.offsets().0.get(&0), Some(&RECORDS));
    assert!(reader.next().await.is_none(), "nothing more");

    // A named consumer goes on after each loss, and its automatic store moves past them.
    let mut consumer = t
        .consumer("named", 0)
        .start_at(StartAt::First)
        .commit_policy(CommitPolicy::Each)
        .max_wait(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let mut seen = Seen::default();
    for _ in 0..100 {
        match consumer.next_within(Duration::from_millis(500)).await {
            Err(ClientError::Timeout(_)) => break,
            item => seen.take(item),
        }
    }
    seen.check(lost, corrupt);
    consumer.shutdown().await.unwrap();
    assert_eq!(consumer.last_stored_offset(0), Some(RECORDS - 1));

    // A group member likewise.
    let mut member = t
        .consumer_group("g")
        .commit_policy(CommitPolicy::Disabled)
        .poll_interval(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let mut seen = Seen::default();
    for _ in 0..100 {
        match member.next_within(Duration::from_millis(500)).await {
            Err(ClientError::Timeout(_)) => break,
            item => seen.take(item),
        }
    }
    seen.check(lost, corrupt);
    member.shutdown().await.unwrap();

    // The raw fetch names the corrupt batch too, after the records before it.
    let before = t
        .fetch(Position::new(0, corrupt - 1), 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(before.records.len(), 1);
    assert_eq!(before.next_offset, corrupt);
    let err = t
        .fetch(Position::new(0, corrupt), 1 << 20, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Corrupt { from, to, .. } if from == corrupt && to == corrupt + 1),
        "{err}"
    );
    let err = t
        .fetch(Position::new(0, lost.0), 1 << 20, Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(err.lost_range(), Some((0, lost.0, Some(lost.1))), "{err}");
    client.close().await.unwrap();
}

/// Damage at the end of the log has no known end until an operator accepts it; the log
/// ends where the damage starts, so readers see the end, and the partition refuses
/// appends. Once the loss is accepted, appends resume after it, and a reader that comes
/// there is told of the range (now with an end) once and reads on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_at_the_end_is_reported_once_accepted_and_appends_go_on_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let client = Client::open(&data).await.unwrap();
        let t = client.stream("s").topic("t");
        t.ensure(1).await.unwrap();
        for i in 0..5 {
            t.publish().value(value(i)).send().await.unwrap();
        }
        client.close().await.unwrap();
    }
    // The last segment loses synced data: its end is gone, and what it held is unknown.
    let logs = segment_logs(&data);
    let len = std::fs::metadata(&logs[0]).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&logs[0])
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let client = Client::open(&data).await.unwrap();
    let t = client.stream("s").topic("t");
    let d = t.describe().await.unwrap();
    let damaged = d.partitions[0].damaged.clone();
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert_eq!(damaged[0].to, None, "{damaged:?}");
    let from = damaged[0].from;
    let refused = t.publish().value("refused").send().await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(rill_client::ErrorCode::StorageFailure),
        "{refused}"
    );

    let mut consumer = t
        .consumer("named", 0)
        .start_at(StartAt::First)
        .commit_policy(CommitPolicy::Each)
        .poll_interval(Duration::from_millis(20))
        .max_wait(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let mut seen = Seen::default();
    for _ in 0..100 {
        match consumer.next_within(Duration::from_millis(300)).await {
            Err(ClientError::Timeout(_)) => break,
            item => seen.take(item),
        }
    }
    assert_eq!(seen.offsets, (0..from).collect::<Vec<_>>());
    assert!(seen.lost.is_empty(), "{seen:?}");

    // The operator accepts the loss: appends resume, and the range gets its end.
    let state = t.repair(0, true).await.unwrap();
    assert!(state.failure.is_none(), "{state:?}");
    assert!(state.damaged[0].accepted, "{state:?}");
    let end = state.damaged[0].to.expect("an end once accepted");
    let at = t.publish().value(value(99)).send().await.unwrap();
    assert_eq!(at.offset, end);
    let mut seen = Seen::default();
    let mut after = Vec::new();
    for _ in 0..100 {
        match consumer.next_within(Duration::from_millis(300)).await {
            Err(ClientError::Timeout(_)) => break,
            Ok(r) => after.push(r.offset),
            item => seen.take(item),
        }
    }
    assert_eq!(seen.lost, vec![(from, Some(end), "data loss")], "once");
    assert_eq!(after, vec![at.offset]);
    consumer.shutdown().await.unwrap();
    assert_eq!(consumer.last_stored_offset(0), Some(at.offset));

    // A reader from the start: every intact record, the loss once, the new record.
    let mut reader = t.records("r");
    let mut seen = Seen::default();
    let mut after = Vec::new();
    while let Some(item) = reader.next().await {
        match item {
            Ok(r) if r.offset == at.offset => after.push(r.offset),
            item => seen.take(item),
        }
    }
    assert_eq!(seen.offsets, (0..from).collect::<Vec<_>>());
    assert_eq!(seen.lost, vec![(from, Some(end), "data loss")]);
    assert_eq!(after, vec![at.offset]);
    client.close().await.unwrap();
}
