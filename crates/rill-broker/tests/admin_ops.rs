//! The operators' requests on a topic's consumers and options, through `Broker::handle`
//! as a client sends them (docs/PROTOCOL.md §3.25–3.30): listing groups and named
//! consumers with their lag, deleting a group, resetting stored offsets, altering a
//! topic; their refusals and bad input; what survives a reopen (a purge too, whose own
//! tests are `purge.rs`); and the altered options taking effect on the live
//! partitions.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use rill_broker::{Broker, BrokerConfig};
use rill_format::{BatchBuilder, NewRecord};
use rill_proto::pb::{self, ErrorCode, ErrorResponse};
use rill_proto::{Request, RequestBody, Response, ResponseBody};
use rill_storage::Io;
use rill_storage::sim::SimIo;

fn open(dir: &Path) -> Arc<Broker> {
    Arc::new(Broker::open(BrokerConfig::new(dir)).unwrap())
}

fn batch(values: &[&str]) -> Bytes {
    let mut b = BatchBuilder::new();
    for v in values {
        b.push(NewRecord::value(v.as_bytes())).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

/// A broker with topic s/t of `partitions` partitions, partition `p` holding `p + 3`
/// records.
async fn setup(broker: &Arc<Broker>, partitions: u32) {
    broker
        .create_topic(
            "s",
            "t",
            &pb::TopicOptions {
                partitions,
                ..Default::default()
            },
            false,
            true,
        )
        .unwrap();
    for p in 0..partitions {
        let values: Vec<String> = (0..p + 3).map(|i| format!("r{i}")).collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        broker.produce("s", "t", p, batch(&values)).await.unwrap();
    }
}

async fn call(broker: &Arc<Broker>, body: RequestBody) -> Result<ResponseBody, ErrorResponse> {
    match broker.handle(Request::new(body)).await {
        Response::Ok { body, .. } => Ok(body),
        Response::Err { error, .. } => Err(error),
    }
}

fn code(e: &ErrorResponse) -> ErrorCode {
    ErrorCode::try_from(e.code).unwrap()
}

async fn join(broker: &Arc<Broker>, group: &str) -> pb::GroupAssignment {
    let body = RequestBody::JoinGroup(pb::JoinGroupRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: group.into(),
        member_id: String::new(),
        session_timeout_ms: None,
        create_group: None,
    });
    match call(broker, body).await {
        Ok(ResponseBody::JoinGroup(r)) => r.assignment.unwrap(),
        other => panic!("join: {other:?}"),
    }
}

async fn heartbeat(broker: &Arc<Broker>, group: &str, member: &str) -> pb::GroupAssignment {
    let body = RequestBody::GroupHeartbeat(pb::GroupHeartbeatRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: group.into(),
        member_id: member.into(),
        revoked: vec![],
        metrics: vec![],
    });
    match call(broker, body).await {
        Ok(ResponseBody::GroupHeartbeat(r)) => r.assignment.unwrap(),
        other => panic!("heartbeat: {other:?}"),
    }
}

async fn leave(broker: &Arc<Broker>, group: &str, member: &str) {
    let body = RequestBody::LeaveGroup(pb::LeaveGroupRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: group.into(),
        member_id: member.into(),
    });
    call(broker, body).await.unwrap();
}

async fn commit(broker: &Arc<Broker>, group: &str, a: &pb::GroupAssignment, p: u32, offset: u64) {
    let body = RequestBody::CommitGroupOffset(pb::CommitGroupOffsetRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: group.into(),
        member_id: a.member_id.clone(),
        generation: a.generation,
        partition: p,
        offset,
    });
    call(broker, body).await.unwrap();
}

async fn list_groups(broker: &Arc<Broker>) -> Vec<pb::GroupSummary> {
    let body = RequestBody::ListGroups(pb::ListGroupsRequest {
        stream: "s".into(),
        topic: "t".into(),
        after: String::new(),
    });
    match call(broker, body).await {
        Ok(ResponseBody::ListGroups(r)) => {
            assert_eq!(r.next, None);
            r.groups
        }
        other => panic!("list groups: {other:?}"),
    }
}

async fn list_consumers(broker: &Arc<Broker>) -> Vec<pb::ConsumerSummary> {
    let body = RequestBody::ListConsumers(pb::ListConsumersRequest {
        stream: "s".into(),
        topic: "t".into(),
        after: String::new(),
    });
    match call(broker, body).await {
        Ok(ResponseBody::ListConsumers(r)) => r.consumers,
        other => panic!("list consumers: {other:?}"),
    }
}

fn delete_group(group: &str) -> RequestBody {
    RequestBody::DeleteGroup(pb::DeleteGroupRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: group.into(),
    })
}

fn reset_group(group: &str, to: pb::ResetTo, value: i64, partition: Option<u32>) -> RequestBody {
    RequestBody::ResetGroupOffsets(pb::ResetGroupOffsetsRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: group.into(),
        to: to as i32,
        offset: value.max(0) as u64,
        timestamp_us: value,
        partition,
    })
}

fn reset_consumer(
    consumer: &str,
    to: pb::ResetTo,
    value: i64,
    partition: Option<u32>,
) -> RequestBody {
    RequestBody::ResetConsumerOffsets(pb::ResetConsumerOffsetsRequest {
        stream: "s".into(),
        topic: "t".into(),
        consumer: consumer.into(),
        to: to as i32,
        offset: value.max(0) as u64,
        timestamp_us: value,
        partition,
    })
}

fn offsets(body: Result<ResponseBody, ErrorResponse>) -> Vec<(u32, u64)> {
    let list = match body {
        Ok(ResponseBody::ResetGroupOffsets(r)) => r.offsets,
        Ok(ResponseBody::ResetConsumerOffsets(r)) => r.offsets,
        other => panic!("reset: {other:?}"),
    };
    list.into_iter()
        .map(|o| (o.partition, o.offset.expect("a reset answers every offset")))
        .collect()
}

async fn stored(broker: &Arc<Broker>, consumer: &str, partition: u32) -> Option<u64> {
    broker.get_offset("s", "t", partition, consumer).unwrap()
}

async fn group_offsets(broker: &Arc<Broker>, group: &str) -> Vec<Option<u64>> {
    broker
        .describe_group("s", "t", group)
        .unwrap()
        .partitions
        .into_iter()
        .map(|p| p.stored_offset)
        .collect()
}

fn alter(changes: pb::AlterTopicRequest) -> RequestBody {
    RequestBody::AlterTopic(pb::AlterTopicRequest {
        stream: "s".into(),
        topic: "t".into(),
        ..changes
    })
}

fn altered(body: Result<ResponseBody, ErrorResponse>) -> pb::TopicOptions {
    match body {
        Ok(ResponseBody::AlterTopic(r)) => r.options.unwrap(),
        other => panic!("alter: {other:?}"),
    }
}

#[tokio::test]
async fn groups_are_listed_with_members_generation_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker, 2).await; // partition 0: 3 records, partition 1: 4
    assert!(list_groups(&broker).await.is_empty());
    // "live" has a member that stored partition 0 at 2.
    let live = join(&broker, "live").await;
    commit(&broker, "live", &live, 0, 2).await;
    // "stored" has offsets and no member.
    let a = join(&broker, "stored").await;
    commit(&broker, "stored", &a, 1, 4).await;
    leave(&broker, "stored", &a.member_id).await;
    // "gone" joined and left without storing: it does not exist.
    let g = join(&broker, "gone").await;
    leave(&broker, "gone", &g.member_id).await;
    let groups = list_groups(&broker).await;
    let names: Vec<&str> = groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(names, ["live", "stored"]);
    assert_eq!(groups[0].members, 1);
    assert!(groups[0].generation > 0);
    // 3 - 2 on partition 0, 4 - 0 (nothing stored: from the log start) on partition 1.
    assert_eq!(groups[0].lag, 1 + 4);
    assert_eq!(groups[1].members, 0);
    assert_eq!(
        groups[1].lag, 3,
        "partition 0 from the start, partition 1 at its end"
    );
    // Named consumers are not groups.
    broker.store_offset("s", "t", 0, "c", 1).await.unwrap();
    assert_eq!(list_groups(&broker).await.len(), 2);
    let unknown = call(
        &broker,
        RequestBody::ListGroups(pb::ListGroupsRequest {
            stream: "s".into(),
            topic: "nope".into(),
            after: String::new(),
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(code(&unknown), ErrorCode::TopicNotFound);
}

#[tokio::test]
async fn named_consumers_are_listed_with_their_offsets_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker, 2).await;
    broker.store_offset("s", "t", 0, "b", 1).await.unwrap();
    broker.store_offset("s", "t", 1, "b", 4).await.unwrap();
    broker.store_offset("s", "t", 1, "a", 0).await.unwrap();
    let member = join(&broker, "g").await;
    commit(&broker, "g", &member, 0, 1).await;
    let consumers = list_consumers(&broker).await;
    let names: Vec<&str> = consumers.iter().map(|c| c.consumer.as_str()).collect();
    assert_eq!(names, ["a", "b"], "groups are not named consumers");
    let a = &consumers[0];
    assert_eq!(a.lag, 4);
    assert_eq!(a.partitions.len(), 1);
    assert_eq!((a.partitions[0].partition, a.partitions[0].offset), (1, 0));
    assert_eq!(a.partitions[0].log_end, 4);
    let b = &consumers[1];
    assert_eq!(b.lag, 2);
    let lags: Vec<(u32, u64, u64)> = b
        .partitions
        .iter()
        .map(|p| (p.partition, p.offset, p.lag))
        .collect();
    assert_eq!(lags, [(0, 1, 2), (1, 4, 0)]);
}

#[tokio::test]
async fn a_group_is_deleted_only_without_live_members() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker, 2).await;
    let member = join(&broker, "g").await;
    commit(&broker, "g", &member, 0, 1).await;
    commit(&broker, "g", &member, 1, 2).await;
    let busy = call(&broker, delete_group("g")).await.unwrap_err();
    assert_eq!(code(&busy), ErrorCode::GroupNotEmpty);
    assert!(
        busy.message.contains("1 live member") && busy.message.contains("stop them first"),
        "{}",
        busy.message
    );
    assert_eq!(
        group_offsets(&broker, "g").await,
        [Some(1), Some(2)],
        "a refused delete changes nothing"
    );
    leave(&broker, "g", &member.member_id).await;
    match call(&broker, delete_group("g")).await {
        Ok(ResponseBody::DeleteGroup(r)) => assert_eq!(r.offsets_deleted, 2),
        other => panic!("{other:?}"),
    }
    assert!(list_groups(&broker).await.is_empty());
    assert!(broker.describe_group("s", "t", "g").is_err());
    let again = call(&broker, delete_group("g")).await.unwrap_err();
    assert_eq!(code(&again), ErrorCode::GroupNotFound);
    let bad = call(&broker, delete_group("no/slash")).await.unwrap_err();
    assert_eq!(code(&bad), ErrorCode::InvalidName);
    // A new member of a group of that name starts afresh.
    let fresh = join(&broker, "g").await;
    assert!(
        fresh.offsets.iter().all(|o| o.offset.is_none()),
        "{fresh:?}"
    );
}

#[tokio::test]
async fn a_group_reset_moves_every_offset_it_names_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker, 2).await; // ends 3 and 4
    let first = offsets(call(&broker, reset_group("g", pb::ResetTo::End, 0, None)).await);
    assert_eq!(
        first,
        [(0, 3), (1, 4)],
        "a group that does not exist gets its offsets"
    );
    assert_eq!(group_offsets(&broker, "g").await, [Some(3), Some(4)]);
    let one = offsets(call(&broker, reset_group("g", pb::ResetTo::First, 0, Some(1))).await);
    assert_eq!(one, [(1, 0)]);
    assert_eq!(group_offsets(&broker, "g").await, [Some(3), Some(0)]);
    // Offset 4 is past partition 0's end: refused, naming it, and partition 1 unchanged.
    let out = call(&broker, reset_group("g", pb::ResetTo::Offset, 4, None))
        .await
        .unwrap_err();
    assert_eq!(code(&out), ErrorCode::OffsetBeyondEnd);
    assert_eq!(out.offset, Some(3));
    assert!(
        out.message.contains("partition 0") && out.message.contains("0..3"),
        "{}",
        out.message
    );
    assert_eq!(group_offsets(&broker, "g").await, [Some(3), Some(0)]);
    let at = offsets(call(&broker, reset_group("g", pb::ResetTo::Offset, 2, None)).await);
    assert_eq!(at, [(0, 2), (1, 2)]);
    // Timestamps: before every record is the start, after every record the end.
    let early = offsets(call(&broker, reset_group("g", pb::ResetTo::Timestamp, 0, None)).await);
    assert_eq!(early, [(0, 0), (1, 0)]);
    let late = offsets(
        call(
            &broker,
            reset_group("g", pb::ResetTo::Timestamp, i64::MAX, None),
        )
        .await,
    );
    assert_eq!(late, [(0, 3), (1, 4)]);
    // A live member refuses it, saying why; its first assignment had the reset offsets.
    let member = join(&broker, "g").await;
    let resumed: Vec<(u32, Option<u64>)> = member
        .offsets
        .iter()
        .map(|o| (o.partition, o.offset))
        .collect();
    assert_eq!(resumed, [(0, Some(3)), (1, Some(4))]);
    let busy = call(&broker, reset_group("g", pb::ResetTo::First, 0, None))
        .await
        .unwrap_err();
    assert_eq!(code(&busy), ErrorCode::GroupNotEmpty);
    assert!(busy.message.contains("stop them first"), "{}", busy.message);
    // Bad input.
    let bad = [
        (
            reset_group("g", pb::ResetTo::Unspecified, 0, None),
            ErrorCode::InvalidRequest,
        ),
        (
            reset_group("g", pb::ResetTo::First, 0, Some(9)),
            ErrorCode::PartitionNotFound,
        ),
        (
            reset_group("bad name", pb::ResetTo::First, 0, None),
            ErrorCode::InvalidName,
        ),
    ];
    for (body, want) in bad {
        let e = call(&broker, body).await.unwrap_err();
        assert_eq!(code(&e), want, "{}", e.message);
    }
    let unknown = call(
        &broker,
        RequestBody::ResetGroupOffsets(pb::ResetGroupOffsetsRequest {
            stream: "s".into(),
            topic: "t".into(),
            group: "g".into(),
            to: 42,
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(code(&unknown), ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn a_named_consumer_reset_sets_its_stored_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker, 2).await;
    broker.store_offset("s", "t", 0, "c", 3).await.unwrap();
    let reset = offsets(call(&broker, reset_consumer("c", pb::ResetTo::First, 0, None)).await);
    assert_eq!(reset, [(0, 0), (1, 0)]);
    assert_eq!(stored(&broker, "c", 0).await, Some(0));
    assert_eq!(stored(&broker, "c", 1).await, Some(0));
    let one = offsets(
        call(
            &broker,
            reset_consumer("c", pb::ResetTo::Offset, 1, Some(0)),
        )
        .await,
    );
    assert_eq!(one, [(0, 1)]);
    let before = call(
        &broker,
        reset_consumer("c", pb::ResetTo::Offset, 5, Some(1)),
    )
    .await
    .unwrap_err();
    assert_eq!(code(&before), ErrorCode::OffsetBeyondEnd);
    assert_eq!(stored(&broker, "c", 1).await, Some(0));
    let bad = call(&broker, reset_consumer("", pb::ResetTo::First, 0, None))
        .await
        .unwrap_err();
    assert_eq!(code(&bad), ErrorCode::InvalidName);
}

#[tokio::test]
async fn altering_a_topic_changes_its_options_and_adds_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker, 2).await;
    let member = join(&broker, "g").await;
    assert_eq!(member.owned, [0, 1]);
    let options = altered(
        call(
            &broker,
            alter(pb::AlterTopicRequest {
                retention_ms: Some(pb::LimitChange {
                    value: Some(3_600_000),
                }),
                retention_bytes: Some(pb::LimitChange {
                    value: Some(1 << 20),
                }),
                durability: pb::Durability::Interval as i32,
                durability_interval_ms: Some(25),
                partitions: Some(3),
                ..Default::default()
            }),
        )
        .await,
    );
    assert_eq!(options.partitions, 3);
    assert_eq!(options.retention_ms, Some(3_600_000));
    assert_eq!(options.retention_bytes, Some(1 << 20));
    assert_eq!(options.durability, pb::Durability::Interval as i32);
    assert_eq!(options.durability_interval_ms, Some(25));
    let (config, partitions) = broker.describe_topic("s", "t").unwrap();
    assert_eq!(config.to_proto(), options);
    assert_eq!(partitions.len(), 3);
    // The added partition takes records, and the group's member is given it.
    broker.produce("s", "t", 2, batch(&["new"])).await.unwrap();
    assert_eq!(
        heartbeat(&broker, "g", &member.member_id).await.owned,
        [0, 1, 2]
    );
    // Clearing a limit, and changing nothing.
    let cleared = altered(
        call(
            &broker,
            alter(pb::AlterTopicRequest {
                retention_ms: Some(pb::LimitChange { value: None }),
                ..Default::default()
            }),
        )
        .await,
    );
    assert_eq!(cleared.retention_ms, None);
    assert_eq!(cleared.retention_bytes, Some(1 << 20));
    let same = altered(call(&broker, alter(pb::AlterTopicRequest::default())).await);
    assert_eq!(same, cleared);
    // Refusals.
    let fewer = call(
        &broker,
        alter(pb::AlterTopicRequest {
            partitions: Some(2),
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(code(&fewer), ErrorCode::InvalidConfig);
    assert!(
        fewer.message.contains("can only be added"),
        "{}",
        fewer.message
    );
    let zero = call(
        &broker,
        alter(pb::AlterTopicRequest {
            retention_bytes: Some(pb::LimitChange { value: Some(0) }),
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(code(&zero), ErrorCode::InvalidConfig);
    let missing = call(
        &broker,
        RequestBody::AlterTopic(pb::AlterTopicRequest {
            stream: "s".into(),
            topic: "nope".into(),
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(code(&missing), ErrorCode::TopicNotFound);
    assert_eq!(
        broker.describe_topic("s", "t").unwrap().1.len(),
        3,
        "a refused alter changes nothing"
    );
}

#[tokio::test]
async fn altered_options_purges_and_resets_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path());
        setup(&broker, 1).await;
        altered(
            call(
                &broker,
                alter(pb::AlterTopicRequest {
                    durability: pb::Durability::Never as i32,
                    retention_ms: Some(pb::LimitChange {
                        value: Some(60_000),
                    }),
                    partitions: Some(4),
                    ..Default::default()
                }),
            )
            .await,
        );
        broker
            .produce("s", "t", 3, batch(&["x", "y"]))
            .await
            .unwrap();
        let purged = call(
            &broker,
            RequestBody::PurgeTopic(pb::PurgeTopicRequest {
                stream: "s".into(),
                topic: "t".into(),
                partition: Some(0),
                before: pb::PurgeTo::Offset as i32,
                offset: 2,
                timestamp_us: 0,
            }),
        )
        .await;
        assert!(
            matches!(purged, Ok(ResponseBody::PurgeTopic(_))),
            "{purged:?}"
        );
        offsets(call(&broker, reset_group("g", pb::ResetTo::End, 0, None)).await);
        offsets(
            call(
                &broker,
                reset_consumer("c", pb::ResetTo::Offset, 1, Some(3)),
            )
            .await,
        );
        broker.shutdown().unwrap();
    }
    let broker = open(dir.path());
    let (config, partitions) = broker.describe_topic("s", "t").unwrap();
    assert_eq!(config.partitions, 4);
    assert_eq!(config.durability, rill_storage::Durability::Never);
    assert_eq!(config.retention_ms, Some(60_000));
    assert_eq!(partitions[3].next_offset, 2);
    assert_eq!(
        (partitions[0].first_offset, partitions[0].next_offset),
        (2, 3)
    );
    assert_eq!(
        group_offsets(&broker, "g").await,
        [Some(3), Some(0), Some(0), Some(2)]
    );
    assert_eq!(stored(&broker, "c", 3).await, Some(1));
}

#[tokio::test]
async fn partitions_an_alter_created_before_a_crash_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path());
        setup(&broker, 1).await;
        broker.shutdown().unwrap();
    }
    // What an alter that crashed before saving its catalog leaves.
    let orphan: PathBuf = dir.path().join("streams/s/t/1");
    std::fs::create_dir_all(&orphan).unwrap();
    std::fs::write(orphan.join("00000000000000000000.log"), b"junk").unwrap();
    let broker = open(dir.path());
    assert!(!orphan.exists());
    altered(
        call(
            &broker,
            alter(pb::AlterTopicRequest {
                partitions: Some(2),
                ..Default::default()
            }),
        )
        .await,
    );
    assert_eq!(broker.describe_topic("s", "t").unwrap().1[1].next_offset, 0);
}

/// The live logs take the altered durability at once: a batch produced after a move to
/// `never` is acknowledged without a sync (a power loss that keeps only synced bytes
/// takes it back), one produced after the move back to `always` is synced.
#[tokio::test]
async fn altered_durability_takes_effect_without_a_restart() {
    let io = SimIo::new(7);
    // The data directory's parent exists durably, as a real disk's would.
    io.create_dir_all(Path::new("/sim")).unwrap();
    io.sync_dir(Path::new("/")).unwrap();
    let config = || {
        let mut c = BrokerConfig::new("/sim/data");
        c.io = Arc::new(io.clone());
        c.reserved_space_bytes = 64 << 10;
        c
    };
    let broker = Arc::new(Broker::open(config()).unwrap());
    setup(&broker, 1).await; // 3 records, synced (`always`)
    let set = |d: pb::Durability| {
        alter(pb::AlterTopicRequest {
            durability: d as i32,
            ..Default::default()
        })
    };
    altered(call(&broker, set(pb::Durability::Never)).await);
    broker
        .produce("s", "t", 0, batch(&["unsynced"]))
        .await
        .unwrap();
    let lost = io.power_loss_durable();
    altered(call(&broker, set(pb::Durability::Always)).await);
    broker
        .produce("s", "t", 0, batch(&["synced"]))
        .await
        .unwrap();
    let kept = io.power_loss_durable();
    drop(broker);
    let end = |disk: &SimIo| {
        let mut c = BrokerConfig::new("/sim/data");
        c.io = Arc::new(disk.clone());
        c.reserved_space_bytes = 64 << 10;
        let b = Broker::open(c).unwrap();
        b.describe_topic("s", "t").unwrap().1[0].next_offset
    };
    // The catalog change itself was synced before it was answered.
    assert_eq!(
        end(&lost),
        3,
        "the batch produced under `never` was not synced"
    );
    assert_eq!(
        end(&kept),
        5,
        "moving back to `always` synced it, and the next batch too"
    );
}
