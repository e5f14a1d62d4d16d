//! The SDK's operator calls on a topic, over both transports (the real `rill` binary on
//! a free port, `tcp::*`, and an in-process broker, `embedded::*`): listing groups and
//! named consumers with their lag, resetting and deleting a group, resetting a named
//! consumer, altering a topic while it serves, and purging its records.

#[macro_use]
mod common;

use std::time::Duration;

use rill_client::{
    Client, ClientError, CommitPolicy, Durability, ErrorCode, Position, PurgeTo, ResetTo,
    StoredOffset, Topic, TopicChanges,
};

over_both_transports!(
    groups_and_named_consumers_are_listed_with_their_lag,
    a_reset_group_reads_from_its_new_offsets_and_a_deleted_one_from_its_start,
    a_reset_named_consumer_reads_from_its_new_offset,
    an_altered_topic_takes_records_in_its_added_partitions_and_keeps_its_options,
    a_purged_topic_is_read_from_its_new_start,
);

/// A topic of `partitions` partitions with `per_partition` records in each.
async fn topic(client: &Client, name: &str, partitions: u32, per_partition: u64) -> Topic {
    let t = client.stream("sdka").topic(name);
    t.ensure(partitions).await.unwrap();
    for p in 0..partitions {
        for i in 0..per_partition {
            t.publish()
                .partition(p)
                .value(format!("p{p}-{i}"))
                .send()
                .await
                .unwrap();
        }
    }
    t
}

fn offsets(list: &[StoredOffset]) -> Vec<(u32, u64)> {
    list.iter().map(|o| (o.partition, o.next_offset)).collect()
}

async fn groups_and_named_consumers_are_listed_with_their_lag(client: &Client) {
    let t = topic(client, "lists", 2, 5).await;
    assert!(t.groups().await.unwrap().is_empty());
    assert!(t.consumers().await.unwrap().is_empty());
    let mut member = t
        .consumer_group("g")
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    let first = member.next_within(Duration::from_secs(10)).await.unwrap();
    member.commit(&first).await.unwrap();
    t.reset_consumer("c", ResetTo::Offset(2), Some(1))
        .await
        .unwrap();
    let groups = t.groups().await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].name, "g");
    assert_eq!(groups[0].members, 1);
    assert!(groups[0].generation > 0);
    // One record of one partition committed: 10 - 1 left.
    assert_eq!(groups[0].lag, 9);
    let consumers = t.consumers().await.unwrap();
    assert_eq!(consumers.len(), 1, "a group is not a named consumer");
    assert_eq!(consumers[0].name, "c");
    assert_eq!(consumers[0].lag, 3);
    let p = &consumers[0].partitions;
    assert_eq!(p.len(), 1);
    assert_eq!(
        (p[0].partition, p[0].next_offset, p[0].log_end, p[0].lag),
        (1, 2, 5, 3)
    );
    member.shutdown().await.unwrap();
    // Its offset is stored: the group is still listed, without members.
    let groups = t.groups().await.unwrap();
    assert_eq!((groups[0].members, groups[0].lag), (0, 9));
}

async fn a_reset_group_reads_from_its_new_offsets_and_a_deleted_one_from_its_start(
    client: &Client,
) {
    let t = topic(client, "reset", 1, 6).await;
    let reset = t.reset_group("g", ResetTo::Offset(4), None).await.unwrap();
    assert_eq!(offsets(&reset), [(0, 4)]);
    let mut member = t.consumer_group("g").build().await.unwrap();
    let r = member.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        r.offset, 4,
        "a new member starts where the reset put the group"
    );
    // A live member refuses a reset and a delete, saying what to do.
    let busy = t.reset_group("g", ResetTo::First, None).await.unwrap_err();
    assert_eq!(busy.code(), Some(ErrorCode::GroupNotEmpty), "{busy}");
    assert!(busy.to_string().contains("stop them first"), "{busy}");
    let busy = t.delete_group("g").await.unwrap_err();
    assert_eq!(busy.code(), Some(ErrorCode::GroupNotEmpty), "{busy}");
    member.shutdown().await.unwrap();
    // Out of range: refused, naming the partition, and nothing changed.
    let past = t
        .reset_group("g", ResetTo::Offset(7), None)
        .await
        .unwrap_err();
    assert_eq!(past.code(), Some(ErrorCode::OffsetBeyondEnd), "{past}");
    assert!(past.to_string().contains("partition 0"), "{past}");
    let stored = t.describe_group("g").await.unwrap().partitions[0].stored_offset;
    assert_eq!(stored, Some(5), "the member stored its offset at shutdown");
    let end = t.reset_group("g", ResetTo::End, Some(0)).await.unwrap();
    assert_eq!(offsets(&end), [(0, 6)]);
    let early = t
        .reset_group("g", ResetTo::TimestampMicros(0), None)
        .await
        .unwrap();
    assert_eq!(offsets(&early), [(0, 0)]);
    assert_eq!(t.delete_group("g").await.unwrap(), 1);
    let gone = t.delete_group("g").await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::GroupNotFound), "{gone}");
    assert!(t.groups().await.unwrap().is_empty());
}

async fn a_reset_named_consumer_reads_from_its_new_offset(client: &Client) {
    let t = topic(client, "named", 2, 4).await;
    let reset = t.reset_consumer("c", ResetTo::End, None).await.unwrap();
    assert_eq!(offsets(&reset), [(0, 4), (1, 4)]);
    let back = t
        .reset_consumer("c", ResetTo::First, Some(1))
        .await
        .unwrap();
    assert_eq!(offsets(&back), [(1, 0)]);
    let mut c = t.consumer("c", 1).build().await.unwrap();
    let r = c.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.offset, 0);
    c.shutdown().await.unwrap();
    assert_eq!(
        t.stored_offset("c", 0).await.unwrap(),
        Some(3),
        "the last consumed is 3"
    );
    let bad = t.reset_consumer("no:colon", ResetTo::First, None).await;
    assert_eq!(bad.unwrap_err().code(), Some(ErrorCode::InvalidName));
}

async fn an_altered_topic_takes_records_in_its_added_partitions_and_keeps_its_options(
    client: &Client,
) {
    let t = topic(client, "alter", 1, 2).await;
    let mut member = t.consumer_group("g").build().await.unwrap();
    assert_eq!(member.assignment(), vec![0]);
    let config = t
        .alter(
            TopicChanges::new()
                .partitions(3)
                .retention(Some(Duration::from_secs(3600)))
                .retention_bytes(Some(1 << 30))
                .durability(Durability::Interval(Duration::from_millis(20))),
        )
        .await
        .unwrap();
    assert_eq!(config.partitions, 3);
    assert_eq!(config.retention, Some(Duration::from_secs(3600)));
    assert_eq!(config.retention_bytes, Some(1 << 30));
    assert_eq!(
        config.durability,
        Durability::Interval(Duration::from_millis(20))
    );
    // This client routes over the new count at once.
    assert_eq!(t.partitions().await.unwrap(), 3);
    t.publish().partition(2).value("new").send().await.unwrap();
    assert_eq!(t.end_offset(2).await.unwrap(), 1);
    // The group's member is given the added partitions.
    let started = std::time::Instant::now();
    while member.assignment().len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            member.assignment()
        );
        let _ = member.next_within(Duration::from_millis(100)).await;
    }
    member.shutdown().await.unwrap();
    let cleared = t
        .alter(
            TopicChanges::new()
                .retention(None)
                .durability(Durability::Always),
        )
        .await
        .unwrap();
    assert_eq!(cleared.retention, None);
    assert_eq!(cleared.retention_bytes, Some(1 << 30));
    assert_eq!(cleared.durability, Durability::Always);
    let described = t.describe().await.unwrap();
    assert_eq!(described.config, cleared);
    assert_eq!(described.partitions.len(), 3);
    let fewer = t
        .alter(TopicChanges::new().partitions(2))
        .await
        .unwrap_err();
    assert_eq!(fewer.code(), Some(ErrorCode::InvalidConfig), "{fewer}");
    assert!(fewer.to_string().contains("can only be added"), "{fewer}");
}

async fn a_purged_topic_is_read_from_its_new_start(client: &Client) {
    let t = topic(client, "purge", 2, 6).await;
    t.reset_consumer("c", ResetTo::Offset(1), Some(0))
        .await
        .unwrap();
    let starts = t.purge(PurgeTo::Offset(4), Some(0)).await.unwrap();
    assert_eq!(
        starts
            .iter()
            .map(|s| (s.partition, s.log_start))
            .collect::<Vec<_>>(),
        [(0, 4)]
    );
    assert_eq!(t.first_offset(0).await.unwrap(), 4);
    match t.fetch(Position::new(0, 1), 1 << 20, Duration::ZERO).await {
        Err(ClientError::Server {
            code: ErrorCode::OffsetBeforeStart,
            offset: Some(4),
            ..
        }) => {}
        other => panic!("a fetch below the purged start: {other:?}"),
    }
    // A named consumer whose stored offset is below the start goes on from it.
    let mut c = t.consumer("c", 0).build().await.unwrap();
    let r = c.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.offset, 4);
    c.shutdown().await.unwrap();
    // Past an end: refused, nothing purged.
    let past = t.purge(PurgeTo::Offset(7), None).await.unwrap_err();
    assert_eq!(past.code(), Some(ErrorCode::OffsetBeyondEnd), "{past}");
    assert_eq!(t.first_offset(1).await.unwrap(), 0);
    let all = t.purge(PurgeTo::End, None).await.unwrap();
    assert_eq!(
        all.iter()
            .map(|s| (s.partition, s.log_start))
            .collect::<Vec<_>>(),
        [(0, 6), (1, 6)]
    );
    let described = t.describe().await.unwrap();
    assert!(described.partitions.iter().all(|p| p.first_offset == 6));
}
