//! Consumer-group requests through `Broker::handle`, as a client sends them: joining
//! only an existing group (`JoinGroup.create_group = false`) and deleting a group's
//! stored offset (`DeleteGroupOffset`, as the owning member or as an admin).

use std::sync::Arc;

use bytes::Bytes;
use rill_broker::{Broker, BrokerConfig};
use rill_format::{BatchBuilder, NewRecord};
use rill_proto::pb::{self, ErrorCode};
use rill_proto::{Request, RequestBody, Response, ResponseBody};

fn open(dir: &std::path::Path) -> Arc<Broker> {
    Arc::new(Broker::open(BrokerConfig::new(dir)).unwrap())
}

async fn setup(dir: &std::path::Path, partitions: u32) -> Arc<Broker> {
    let broker = open(dir);
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
        let mut b = BatchBuilder::new();
        for v in ["a", "b", "c"] {
            b.push(NewRecord::value(v.as_bytes())).unwrap();
        }
        broker
            .produce("s", "t", p, Bytes::from(b.finish().unwrap()))
            .await
            .unwrap();
    }
    broker
}

async fn call(broker: &Arc<Broker>, body: RequestBody) -> Result<ResponseBody, ErrorCode> {
    match broker.handle(Request::new(body)).await {
        Response::Ok { body, .. } => Ok(body),
        Response::Err { error, .. } => Err(ErrorCode::try_from(error.code).unwrap()),
    }
}

fn join(member: &str, create_group: Option<bool>) -> RequestBody {
    RequestBody::JoinGroup(pb::JoinGroupRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: member.into(),
        session_timeout_ms: None,
        create_group,
    })
}

async fn joined(broker: &Arc<Broker>, body: RequestBody) -> pb::GroupAssignment {
    match call(broker, body).await {
        Ok(ResponseBody::JoinGroup(r)) => r.assignment.unwrap(),
        other => panic!("join: {other:?}"),
    }
}

fn leave(member: &str) -> RequestBody {
    RequestBody::LeaveGroup(pb::LeaveGroupRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: member.into(),
    })
}

fn commit(member: &str, generation: u64, partition: u32, offset: u64) -> RequestBody {
    RequestBody::CommitGroupOffset(pb::CommitGroupOffsetRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: member.into(),
        generation,
        partition,
        offset,
    })
}

fn delete(group: &str, member: &str, generation: u64, partition: u32) -> RequestBody {
    RequestBody::DeleteGroupOffset(pb::DeleteGroupOffsetRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: group.into(),
        member_id: member.into(),
        generation,
        partition,
    })
}

async fn deleted(broker: &Arc<Broker>, body: RequestBody) -> Result<bool, ErrorCode> {
    match call(broker, body).await? {
        ResponseBody::DeleteGroupOffset(r) => Ok(r.deleted),
        other => panic!("delete: {other:?}"),
    }
}

async fn stored(broker: &Broker, partition: u32) -> Option<u64> {
    broker.describe_group("s", "t", "g").unwrap().partitions[partition as usize].stored_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_that_must_not_create_finds_only_a_group_with_members_or_offsets() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = setup(dir.path(), 2).await;
        assert_eq!(
            call(&broker, join("a", Some(false))).await.unwrap_err(),
            ErrorCode::GroupNotFound
        );
        // Absent means "create", as before the field existed; so does true.
        let a = joined(&broker, join("a", None)).await;
        assert_eq!(a.owned, vec![0, 1]);
        // A live member makes the group exist.
        let b = joined(&broker, join("b", Some(false))).await;
        assert!(b.owned.is_empty(), "cooperative: nothing until a lets go");
        call(&broker, leave("a")).await.unwrap();
        call(&broker, leave("b")).await.unwrap();
        // Every member left and nothing is stored: the group is gone, for joins and
        // for DescribeGroup alike.
        assert_eq!(
            call(&broker, join("c", Some(false))).await.unwrap_err(),
            ErrorCode::GroupNotFound
        );
        assert!(matches!(
            broker.describe_group("s", "t", "g"),
            Err(rill_broker::BrokerError::GroupNotFound(_))
        ));
        // A stored offset keeps the group after its members left.
        let c = joined(&broker, join("c", Some(true))).await;
        call(&broker, commit("c", c.generation, 1, 2))
            .await
            .unwrap();
        call(&broker, leave("c")).await.unwrap();
        joined(&broker, join("d", Some(false))).await;
        call(&broker, leave("d")).await.unwrap();
        broker.shutdown().unwrap();
    }
    // Across a restart, too: the stored offset is there, the members are not.
    let broker = open(dir.path());
    let d = joined(&broker, join("d", Some(false))).await;
    let resumed = d.offsets.iter().find(|o| o.partition == 1).unwrap();
    assert_eq!(resumed.offset, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_deletes_the_group_offset_only_of_a_partition_it_owns() {
    let dir = tempfile::tempdir().unwrap();
    let broker = setup(dir.path(), 2).await;
    let a = joined(&broker, join("a", None)).await;
    call(&broker, commit("a", a.generation, 0, 2))
        .await
        .unwrap();
    assert_eq!(stored(&broker, 0).await, Some(2));
    assert_eq!(
        deleted(&broker, delete("g", "a", a.generation, 0)).await,
        Ok(true)
    );
    assert_eq!(stored(&broker, 0).await, None);
    assert_eq!(
        deleted(&broker, delete("g", "a", a.generation, 0)).await,
        Ok(false)
    );
    // Fenced like a commit: a stranger, a generation from the future, a partition the
    // member gave up.
    assert_eq!(
        deleted(&broker, delete("g", "zombie", a.generation, 0)).await,
        Err(ErrorCode::NotMember)
    );
    assert_eq!(
        deleted(&broker, delete("g", "a", a.generation + 100, 0)).await,
        Err(ErrorCode::StaleGeneration)
    );
    let b = joined(&broker, join("b", None)).await;
    let a = match call(
        &broker,
        RequestBody::GroupHeartbeat(pb::GroupHeartbeatRequest {
            stream: "s".into(),
            topic: "t".into(),
            group: "g".into(),
            member_id: "a".into(),
            revoked: vec![],
            metrics: vec![],
        }),
    )
    .await
    {
        Ok(ResponseBody::GroupHeartbeat(r)) => r.assignment.unwrap(),
        other => panic!("{other:?}"),
    };
    let moving = a.revoke[0];
    broker
        .group_heartbeat("s", "t", "g", "a", &a.revoke, &[])
        .unwrap();
    let b = broker
        .group_heartbeat("s", "t", "g", &b.member_id, &[], &[])
        .unwrap();
    assert_eq!(b.owned, vec![moving]);
    call(&broker, commit("b", b.generation, moving, 3))
        .await
        .unwrap();
    assert_eq!(
        deleted(&broker, delete("g", "a", b.generation, moving)).await,
        Err(ErrorCode::NotAssigned)
    );
    assert_eq!(stored(&broker, moving).await, Some(3));
    assert_eq!(
        deleted(&broker, delete("g", "b", b.generation, moving)).await,
        Ok(true)
    );
    assert_eq!(
        deleted(&broker, delete("g", "b", b.generation, 9)).await,
        Err(ErrorCode::PartitionNotFound)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_delete_waits_for_the_group_to_have_no_members() {
    let dir = tempfile::tempdir().unwrap();
    let broker = setup(dir.path(), 1).await;
    assert_eq!(
        deleted(&broker, delete("g", "", 0, 0)).await,
        Err(ErrorCode::GroupNotFound)
    );
    assert_eq!(
        deleted(&broker, delete("no such", "", 0, 0)).await,
        Err(ErrorCode::InvalidName)
    );
    let a = joined(&broker, join("a", None)).await;
    call(&broker, commit("a", a.generation, 0, 1))
        .await
        .unwrap();
    // A live member would store the offset again: refused, and nothing changes.
    assert_eq!(
        deleted(&broker, delete("g", "", 0, 0)).await,
        Err(ErrorCode::GroupNotEmpty)
    );
    assert_eq!(stored(&broker, 0).await, Some(1));
    call(&broker, leave("a")).await.unwrap();
    assert_eq!(deleted(&broker, delete("g", "", 0, 0)).await, Ok(true));
    // Nothing stored and no members: the group is gone.
    assert_eq!(
        deleted(&broker, delete("g", "", 0, 0)).await,
        Err(ErrorCode::GroupNotFound)
    );
    // The delete is durable.
    broker.shutdown().unwrap();
    drop(broker);
    let broker = open(dir.path());
    assert!(broker.describe_group("s", "t", "g").is_err());
}

fn heartbeat(member: &str, metrics: &[(&str, u64)]) -> RequestBody {
    RequestBody::GroupHeartbeat(pb::GroupHeartbeatRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: member.into(),
        revoked: vec![],
        metrics: metrics
            .iter()
            .map(|(name, value)| pb::MemberMetric {
                name: (*name).into(),
                value: *value,
            })
            .collect(),
    })
}

/// Each member's last report, by member id, from DescribeGroup.
async fn reports(broker: &Arc<Broker>) -> Vec<(String, Vec<(String, u64)>)> {
    let body = RequestBody::DescribeGroup(pb::DescribeGroupRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
    });
    let Ok(ResponseBody::DescribeGroup(d)) = call(broker, body).await else {
        panic!("describe");
    };
    let mut out: Vec<_> = d
        .members
        .into_iter()
        .map(|m| {
            let metrics = m.metrics.into_iter().map(|x| (x.name, x.value)).collect();
            (m.member_id, metrics)
        })
        .collect();
    out.sort();
    out
}

/// A member's heartbeat report is what DescribeGroup shows for it, in name order; an
/// empty report keeps the last; a bad one is refused whole and changes nothing; it goes
/// when the member leaves.
#[tokio::test]
async fn members_report_numbers_with_heartbeats_and_describe_shows_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let broker = setup(dir.path(), 2).await;
    joined(&broker, join("a", None)).await;
    joined(&broker, join("b", None)).await;
    let owned = |v: &[(&str, u64)]| -> Vec<(String, u64)> {
        v.iter().map(|(n, x)| ((*n).to_owned(), *x)).collect()
    };
    assert_eq!(
        reports(&broker).await,
        [("a".to_owned(), vec![]), ("b".to_owned(), vec![])]
    );
    call(
        &broker,
        heartbeat("a", &[("retry_backlog", 7), ("dead_letters", 2)]),
    )
    .await
    .unwrap();
    call(&broker, heartbeat("b", &[("handled", 40)]))
        .await
        .unwrap();
    let first = [
        (
            "a".to_owned(),
            owned(&[("dead_letters", 2), ("retry_backlog", 7)]),
        ),
        ("b".to_owned(), owned(&[("handled", 40)])),
    ];
    assert_eq!(reports(&broker).await, first);
    // Nothing reported: the last report stands.
    call(&broker, heartbeat("a", &[])).await.unwrap();
    assert_eq!(reports(&broker).await, first);
    // Bad reports are refused whole.
    let long = "x".repeat(65);
    let many: Vec<(String, u64)> = (0..65).map(|i| (format!("n{i}"), i)).collect();
    let many: Vec<(&str, u64)> = many.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    for bad in [
        vec![("Upper", 1)],
        vec![("", 1)],
        vec![("ok", 1), (long.as_str(), 2)],
        vec![("twice", 1), ("twice", 2)],
        many,
    ] {
        assert_eq!(
            call(&broker, heartbeat("a", &bad)).await.err(),
            Some(ErrorCode::InvalidRequest),
            "{bad:?}"
        );
    }
    assert_eq!(
        reports(&broker).await,
        first,
        "a refused report changes nothing"
    );
    // A new report replaces the old one whole.
    call(&broker, heartbeat("a", &[("handled", 9)]))
        .await
        .unwrap();
    call(&broker, leave("b")).await.unwrap();
    assert_eq!(
        reports(&broker).await,
        [("a".to_owned(), owned(&[("handled", 9)]))]
    );
}
