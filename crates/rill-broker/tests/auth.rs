//! Authentication and authorization in the broker (docs/SECURITY.md): the matrix of
//! request kind × principal × permission through `Broker::handle_as`, the
//! `Authenticate` exchange of a session (SCRAM and tokens, failures alike, the limiter,
//! revocation of a live session), and `auth.json` on disk.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bytes::Bytes;
use rill_auth::Secret;
use rill_auth::scram::Client as ScramClient;
use rill_auth::store::Authenticated;
use rill_broker::{Broker, BrokerConfig, HttpCredential, Principal, Session, password_verifiers};
use rill_format::{BatchBuilder, NewRecord};
use rill_proto::pb::{self, ErrorCode};
use rill_proto::{Kind, Request, RequestBody, Response, ResponseBody};

const ITER: u32 = 4096;

fn open(dir: &std::path::Path) -> Arc<Broker> {
    let mut config = BrokerConfig::new(dir);
    config.auth_required = true;
    config.scram_iterations = ITER;
    Arc::new(Broker::open(config).unwrap())
}

fn batch() -> Bytes {
    let mut b = BatchBuilder::new();
    b.push(NewRecord::value(b"v")).unwrap();
    Bytes::from(b.finish().unwrap())
}

/// A request of `kind` about stream `s` (topic `t`, partition 0, group `g`). Every
/// kind has one: a new kind fails here until it gets a sample.
fn sample(kind: Kind, s: &str) -> Request {
    use RequestBody as R;
    let s = s.to_owned();
    let t = || "t".to_owned();
    let g = || "g".to_owned();
    let verifiers = || Some(password_verifiers(&Secret::new("new password"), ITER).unwrap());
    let body = match kind {
        Kind::Hello => R::Hello(pb::HelloRequest {
            client: "test".into(),
            protocol_version: 1,
        }),
        Kind::CreateStream => R::CreateStream(pb::CreateStreamRequest {
            name: format!("{s}2"),
            if_missing: true,
        }),
        Kind::DeleteStream => R::DeleteStream(pb::DeleteStreamRequest {
            name: "gone".into(),
        }),
        Kind::ListStreams => R::ListStreams(pb::ListStreamsRequest {}),
        Kind::CreateTopic => R::CreateTopic(pb::CreateTopicRequest {
            stream: s,
            topic: "t2".into(),
            if_missing: true,
            options: Some(pb::TopicOptions {
                partitions: 1,
                ..Default::default()
            }),
            ..Default::default()
        }),
        Kind::DeleteTopic => R::DeleteTopic(pb::DeleteTopicRequest {
            stream: s,
            topic: "gone".into(),
        }),
        Kind::ListTopics => R::ListTopics(pb::ListTopicsRequest { stream: s }),
        Kind::DescribeTopic => R::DescribeTopic(pb::DescribeTopicRequest {
            stream: s,
            topic: t(),
        }),
        Kind::InitProducer => R::InitProducer(pb::InitProducerRequest::default()),
        Kind::Produce => {
            return Request {
                body: R::Produce(pb::ProduceRequest {
                    stream: s,
                    topic: t(),
                    partition: 0,
                    ranged: false,
                }),
                payload: batch(),
            };
        }
        Kind::Fetch => R::Fetch(pb::FetchRequest {
            stream: s,
            topic: t(),
            max_bytes: 1 << 20,
            ..Default::default()
        }),
        Kind::ResolveOffset => R::ResolveOffset(pb::ResolveOffsetRequest {
            stream: s,
            topic: t(),
            ..Default::default()
        }),
        Kind::StoreOffset => R::StoreOffset(pb::StoreOffsetRequest {
            stream: s,
            topic: t(),
            consumer: "c".into(),
            ..Default::default()
        }),
        Kind::GetOffset => R::GetOffset(pb::GetOffsetRequest {
            stream: s,
            topic: t(),
            consumer: "c".into(),
            ..Default::default()
        }),
        Kind::DeleteOffset => R::DeleteOffset(pb::DeleteOffsetRequest {
            stream: s,
            topic: t(),
            consumer: "c".into(),
            ..Default::default()
        }),
        Kind::JoinGroup => R::JoinGroup(pb::JoinGroupRequest {
            stream: s,
            topic: t(),
            group: g(),
            create_group: Some(true),
            ..Default::default()
        }),
        Kind::GroupHeartbeat => R::GroupHeartbeat(pb::GroupHeartbeatRequest {
            stream: s,
            topic: t(),
            group: g(),
            ..Default::default()
        }),
        Kind::LeaveGroup => R::LeaveGroup(pb::LeaveGroupRequest {
            stream: s,
            topic: t(),
            group: g(),
            ..Default::default()
        }),
        Kind::CommitGroupOffset => R::CommitGroupOffset(pb::CommitGroupOffsetRequest {
            stream: s,
            topic: t(),
            group: g(),
            ..Default::default()
        }),
        Kind::DescribeGroup => R::DescribeGroup(pb::DescribeGroupRequest {
            stream: s,
            topic: t(),
            group: g(),
        }),
        Kind::RepairPartition => R::RepairPartition(pb::RepairPartitionRequest {
            stream: s,
            topic: t(),
            ..Default::default()
        }),
        Kind::DeleteGroupOffset => R::DeleteGroupOffset(pb::DeleteGroupOffsetRequest {
            stream: s,
            topic: t(),
            group: g(),
            ..Default::default()
        }),
        Kind::ClusterStatus => R::ClusterStatus(pb::ClusterStatusRequest {}),
        Kind::Authenticate => R::Authenticate(pb::AuthenticateRequest {
            mechanism: "TOKEN".into(),
            data: b"rill_nope".to_vec(),
        }),
        Kind::CreateUser => R::CreateUser(pb::CreateUserRequest {
            name: "carol".into(),
            role: pb::Role::User as i32,
            password: verifiers(),
            quota: None,
        }),
        Kind::DeleteUser => R::DeleteUser(pb::DeleteUserRequest {
            name: "nobody".into(),
        }),
        Kind::ListUsers => R::ListUsers(pb::ListUsersRequest {}),
        Kind::SetPassword => R::SetPassword(pb::SetPasswordRequest {
            name: "root".into(),
            password: verifiers(),
        }),
        Kind::GrantAcl => R::GrantAcl(pb::GrantAclRequest {
            user: "alice".into(),
            stream: "elsewhere".into(),
            permissions: vec![pb::Permission::Read as i32],
        }),
        Kind::RevokeAcl => R::RevokeAcl(pb::RevokeAclRequest {
            user: "alice".into(),
            stream: "elsewhere".into(),
        }),
        Kind::CreateToken => R::CreateToken(pb::CreateTokenRequest {
            name: format!("tok-{s}-{}", rand_suffix()),
            expires_in_ms: None,
        }),
        Kind::ListTokens => R::ListTokens(pb::ListTokensRequest {}),
        Kind::RevokeToken => R::RevokeToken(pb::RevokeTokenRequest {
            name: "none".into(),
        }),
        Kind::WhoAmI => R::WhoAmI(pb::WhoAmIRequest {}),
        // Removes limits alice does not have: it changes nothing.
        Kind::SetQuota => R::SetQuota(pb::SetQuotaRequest {
            user: "alice".into(),
            produce_bytes_per_second: Some(0),
            fetch_bytes_per_second: Some(0),
        }),
        Kind::ListGroups => R::ListGroups(pb::ListGroupsRequest {
            stream: s,
            topic: t(),
            after: String::new(),
        }),
        Kind::ListConsumers => R::ListConsumers(pb::ListConsumersRequest {
            stream: s,
            topic: t(),
            after: String::new(),
        }),
        Kind::DeleteGroup => R::DeleteGroup(pb::DeleteGroupRequest {
            stream: s,
            topic: t(),
            group: g(),
        }),
        // A group without members (the join samples join `g`).
        Kind::ResetGroupOffsets => R::ResetGroupOffsets(pb::ResetGroupOffsetsRequest {
            stream: s,
            topic: t(),
            group: "idle".into(),
            to: pb::ResetTo::End as i32,
            ..Default::default()
        }),
        Kind::ResetConsumerOffsets => R::ResetConsumerOffsets(pb::ResetConsumerOffsetsRequest {
            stream: s,
            topic: t(),
            consumer: "c".into(),
            to: pb::ResetTo::End as i32,
            ..Default::default()
        }),
        // Below offset 0: changes nothing.
        Kind::PurgeTopic => R::PurgeTopic(pb::PurgeTopicRequest {
            stream: s,
            topic: t(),
            partition: Some(0),
            before: pb::PurgeTo::Offset as i32,
            offset: 0,
            timestamp_us: 0,
        }),
        // Changes nothing: a request that names the topic alone.
        Kind::AlterTopic => R::AlterTopic(pb::AlterTopicRequest {
            stream: s,
            topic: t(),
            ..Default::default()
        }),
        // Served by a server's connection; the broker checks a Subscribe as a read.
        Kind::Subscribe => R::Subscribe(pb::SubscribeRequest {
            stream: s,
            topic: t(),
            partition: 0,
            offset: 0,
            credit_bytes: 1,
            credit_frames: 1,
        }),
        Kind::Credit => R::Credit(pb::CreditRequest {
            subscription: 1,
            bytes: 1,
            frames: 1,
        }),
        Kind::Unsubscribe => R::Unsubscribe(pb::UnsubscribeRequest { subscription: 1 }),
        Kind::SplitRange => R::SplitRange(pb::SplitRangeRequest {
            stream: s,
            topic: t(),
            ..Default::default()
        }),
        Kind::MergeRanges => R::MergeRanges(pb::MergeRangesRequest {
            stream: s,
            topic: t(),
            first: 0,
            second: 1,
        }),
        other => panic!("no sample request for {other:?}: add one"),
    };
    Request::new(body)
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// What a request needs, as docs/SECURITY.md §4 writes it: the permissions (any one
/// suffices) on the sample's stream, or the admin role, or only a user.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Needs {
    Nothing,
    AnyUser,
    Admin,
    Read,
    Write,
    Manage,
    ReadWriteOrManage,
}

fn needs(kind: Kind) -> Needs {
    use Kind as K;
    match kind {
        // Credit and Unsubscribe act on the connection's own subscriptions only.
        K::Hello | K::Authenticate | K::Credit | K::Unsubscribe => Needs::Nothing,
        K::ListStreams
        | K::InitProducer
        | K::CreateToken
        | K::ListTokens
        | K::RevokeToken
        | K::WhoAmI => Needs::AnyUser,
        // The sample sets root's password: a user may set only its own (checked below).
        K::SetPassword => Needs::Admin,
        K::CreateStream
        | K::DeleteStream
        | K::RepairPartition
        | K::ClusterStatus
        | K::CreateUser
        | K::DeleteUser
        | K::ListUsers
        | K::GrantAcl
        | K::RevokeAcl
        | K::SetQuota => Needs::Admin,
        K::CreateTopic
        | K::DeleteTopic
        | K::AlterTopic
        | K::PurgeTopic
        | K::SplitRange
        | K::MergeRanges => Needs::Manage,
        K::ListTopics | K::DescribeTopic => Needs::ReadWriteOrManage,
        K::Produce => Needs::Write,
        _ => Needs::Read,
    }
}

fn code(r: &Response) -> Option<ErrorCode> {
    match r {
        Response::Ok { .. } => None,
        Response::Err { error, .. } => Some(error.code()),
    }
}

fn user(name: &str) -> Principal {
    Principal::User(Authenticated {
        user: name.into(),
        token: None,
    })
}

async fn call(broker: &Arc<Broker>, who: &Principal, r: Request) -> Response {
    broker.handle_as(who, r).await
}

fn expect_ok(r: Response) -> ResponseBody {
    match r {
        Response::Ok { body, .. } => body,
        Response::Err { error, .. } => panic!("{:?}: {}", error.code(), error.message),
    }
}

async fn setup(broker: &Arc<Broker>) {
    let owner = Principal::Owner;
    for (name, role) in [
        ("root", pb::Role::Admin),
        ("alice", pb::Role::User),
        ("bob", pb::Role::User),
    ] {
        let r = Request::new(RequestBody::CreateUser(pb::CreateUserRequest {
            name: name.into(),
            role: role as i32,
            password: Some(
                password_verifiers(&Secret::new(format!("{name}'s password")), ITER).unwrap(),
            ),
            quota: None,
        }));
        expect_ok(call(broker, &owner, r).await);
    }
    for stream in ["shop", "bank"] {
        broker.create_stream(stream, true).unwrap();
        broker
            .create_topic(
                stream,
                "t",
                &pb::TopicOptions {
                    partitions: 1,
                    ..Default::default()
                },
                true,
                false,
            )
            .unwrap();
    }
}

async fn grant(broker: &Arc<Broker>, who: &str, stream: &str, p: &[pb::Permission]) {
    let r = Request::new(RequestBody::GrantAcl(pb::GrantAclRequest {
        user: who.into(),
        stream: stream.into(),
        permissions: p.iter().map(|p| *p as i32).collect(),
    }));
    expect_ok(call(broker, &Principal::Owner, r).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_kind_needs_what_the_table_says_for_every_principal() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker).await;
    use pb::Permission as P;
    // One user per permission on "shop"; bob holds everything but on "bank" only.
    let holders = [
        ("reader", P::Read),
        ("writer", P::Write),
        ("manager", P::Manage),
    ];
    for (name, p) in holders {
        let r = Request::new(RequestBody::CreateUser(pb::CreateUserRequest {
            name: name.into(),
            role: pb::Role::User as i32,
            password: Some(password_verifiers(&Secret::new("a password"), ITER).unwrap()),
            quota: None,
        }));
        expect_ok(call(&broker, &Principal::Owner, r).await);
        grant(&broker, name, "shop", &[p]).await;
    }
    grant(&broker, "bob", "bank", &[P::Read, P::Write, P::Manage]).await;

    let mut checked = 0;
    for &kind in Kind::ALL {
        let need = needs(kind);
        // Unauthenticated: only Hello and Authenticate pass the check (Authenticate is
        // a session's step; handle_as refuses it as a request, not as unauthenticated).
        let r = call(&broker, &Principal::Unauthenticated, sample(kind, "shop")).await;
        if need == Needs::Nothing {
            assert_ne!(code(&r), Some(ErrorCode::Unauthenticated), "{kind:?}");
        } else {
            assert_eq!(
                code(&r),
                Some(ErrorCode::Unauthenticated),
                "{kind:?} unauthenticated"
            );
        }
        // bob holds nothing on "shop".
        let r = call(&broker, &user("bob"), sample(kind, "shop")).await;
        let denied = !matches!(need, Needs::Nothing | Needs::AnyUser);
        assert_eq!(
            code(&r) == Some(ErrorCode::PermissionDenied),
            denied,
            "{kind:?} for a user with no permission on the stream: {r:?}"
        );
        // Each single-permission holder: allowed exactly when its permission serves.
        for (name, p) in holders {
            let allowed = match need {
                Needs::Nothing | Needs::AnyUser => true,
                Needs::Admin => false,
                Needs::Read => p == P::Read,
                Needs::Write => p == P::Write,
                Needs::Manage => p == P::Manage,
                Needs::ReadWriteOrManage => true,
            };
            let r = call(&broker, &user(name), sample(kind, "shop")).await;
            let got = code(&r);
            assert!(
                got != Some(ErrorCode::Unauthenticated),
                "{kind:?} {name}: {r:?}"
            );
            assert_eq!(
                got != Some(ErrorCode::PermissionDenied),
                allowed,
                "{kind:?} for {name} ({p:?}): {r:?}"
            );
        }
        // An admin and the owner pass every check.
        for who in [user("root"), Principal::Owner] {
            let r = call(&broker, &who, sample(kind, "shop")).await;
            assert!(
                !matches!(
                    code(&r),
                    Some(ErrorCode::Unauthenticated | ErrorCode::PermissionDenied)
                ),
                "{kind:?} for {who:?}: {r:?}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, Kind::ALL.len());

    // Allowed means served: the holders' own requests succeed.
    expect_ok(call(&broker, &user("writer"), sample(Kind::Produce, "shop")).await);
    let fetched = expect_ok(call(&broker, &user("reader"), sample(Kind::Fetch, "shop")).await);
    assert!(matches!(fetched, ResponseBody::Fetch(_)));
    expect_ok(call(&broker, &user("manager"), sample(Kind::CreateTopic, "shop")).await);
    expect_ok(call(&broker, &user("manager"), sample(Kind::AlterTopic, "shop")).await);
    expect_ok(call(&broker, &user("manager"), sample(Kind::PurgeTopic, "shop")).await);
    for kind in [
        Kind::ListGroups,
        Kind::ListConsumers,
        Kind::ResetGroupOffsets,
        Kind::ResetConsumerOffsets,
    ] {
        expect_ok(call(&broker, &user("reader"), sample(kind, "shop")).await);
    }
    expect_ok(call(&broker, &user("bob"), sample(Kind::Produce, "bank")).await);
    // A user sets its own password, and logs in with it.
    let own = Request::new(RequestBody::SetPassword(pb::SetPasswordRequest {
        name: "bob".into(),
        password: Some(password_verifiers(&Secret::new("bob's new password"), ITER).unwrap()),
    }));
    expect_ok(call(&broker, &user("bob"), own).await);
    scram_login(
        &broker,
        &broker.session(peer(1)),
        "bob",
        "bob's new password",
    )
    .await
    .unwrap();
    // A user lists only the streams it holds an ACL on.
    let ResponseBody::ListStreams(l) =
        expect_ok(call(&broker, &user("bob"), sample(Kind::ListStreams, "")).await)
    else {
        panic!()
    };
    let names: Vec<_> = l.streams.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["bank"]);
    let ResponseBody::ListStreams(l) =
        expect_ok(call(&broker, &user("root"), sample(Kind::ListStreams, "")).await)
    else {
        panic!()
    };
    assert!(l.streams.len() >= 2);
}

async fn step(broker: &Arc<Broker>, session: &Session, mechanism: &str, data: Vec<u8>) -> Response {
    let r = Request::new(RequestBody::Authenticate(pb::AuthenticateRequest {
        mechanism: mechanism.into(),
        data,
    }));
    broker.handle_in(session, r).await
}

/// A whole SCRAM exchange on `session`; the error code if the server refused.
async fn scram_login(
    broker: &Arc<Broker>,
    session: &Session,
    name: &str,
    password: &str,
) -> Result<(), (ErrorCode, String)> {
    let (client, first) = ScramClient::start(name, Secret::new(password)).unwrap();
    let err = |r: Response| match r {
        Response::Err { error, .. } => (error.code(), error.message),
        Response::Ok { .. } => unreachable!(),
    };
    let r = step(broker, session, "SCRAM-SHA-256", first).await;
    let Response::Ok {
        body: ResponseBody::Authenticate(a),
        ..
    } = r
    else {
        return Err(err(r));
    };
    assert!(!a.done);
    let (client, last) = client.on_server_first(&a.data).unwrap();
    let r = step(broker, session, "SCRAM-SHA-256", last).await;
    let Response::Ok {
        body: ResponseBody::Authenticate(a),
        ..
    } = r
    else {
        return Err(err(r));
    };
    assert!(a.done);
    assert_eq!(a.user, name);
    client
        .on_server_final(&a.data)
        .expect("the server proves it knows the password");
    Ok(())
}

fn peer(n: u8) -> Option<IpAddr> {
    Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_authenticates_by_scram_or_token_and_failures_say_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker).await;
    grant(&broker, "alice", "shop", &[pb::Permission::Read]).await;

    // Before authenticating, a session may not fetch.
    let session = broker.session(peer(1));
    let r = broker
        .handle_in(&session, sample(Kind::Fetch, "shop"))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::Unauthenticated));

    scram_login(&broker, &session, "alice", "alice's password")
        .await
        .unwrap();
    assert_eq!(session.principal(), user("alice"));
    let r = broker
        .handle_in(&session, sample(Kind::Fetch, "shop"))
        .await;
    assert_eq!(code(&r), None, "{r:?}");
    // A second exchange on an authenticated session is refused.
    let (_, first) = ScramClient::start("root", Secret::new("root's password")).unwrap();
    let r = step(&broker, &session, "SCRAM-SHA-256", first).await;
    assert_eq!(code(&r), Some(ErrorCode::InvalidRequest));

    // A wrong password and an unknown user fail the same way, at the same step.
    let wrong = scram_login(&broker, &broker.session(peer(2)), "alice", "not it").await;
    let unknown = scram_login(
        &broker,
        &broker.session(peer(3)),
        "mallory",
        "alice's password",
    )
    .await;
    assert_eq!(wrong, unknown);
    assert_eq!(
        wrong,
        Err((
            ErrorCode::Unauthenticated,
            "unauthenticated: authentication failed".into()
        ))
    );

    // Tokens: made by a user for itself, good until revoked, and a revoked token stops
    // a session that logged in with it.
    let r = broker
        .handle_in(
            &session,
            Request::new(RequestBody::CreateToken(pb::CreateTokenRequest {
                name: "ci".into(),
                expires_in_ms: None,
            })),
        )
        .await;
    let Response::Ok {
        body: ResponseBody::CreateToken(t),
        ..
    } = r
    else {
        panic!("{r:?}")
    };
    let by_token = broker.session(peer(4));
    let r = step(&broker, &by_token, "TOKEN", t.token.clone().into_bytes()).await;
    assert_eq!(code(&r), None, "{r:?}");
    let r = broker
        .handle_in(&by_token, sample(Kind::Fetch, "shop"))
        .await;
    assert_eq!(code(&r), None);
    let r = broker
        .handle_in(
            &session,
            Request::new(RequestBody::RevokeToken(pb::RevokeTokenRequest {
                name: "ci".into(),
            })),
        )
        .await;
    assert_eq!(code(&r), None);
    let r = broker
        .handle_in(&by_token, sample(Kind::Fetch, "shop"))
        .await;
    assert_eq!(
        code(&r),
        Some(ErrorCode::Unauthenticated),
        "a revoked token ends its sessions"
    );
    let r = step(
        &broker,
        &broker.session(peer(5)),
        "TOKEN",
        t.token.into_bytes(),
    )
    .await;
    assert_eq!(code(&r), Some(ErrorCode::Unauthenticated));
    // An expired token.
    let r = broker
        .handle_in(
            &session,
            Request::new(RequestBody::CreateToken(pb::CreateTokenRequest {
                name: "brief".into(),
                expires_in_ms: Some(0),
            })),
        )
        .await;
    let Response::Ok {
        body: ResponseBody::CreateToken(t),
        ..
    } = r
    else {
        panic!("{r:?}")
    };
    let r = step(
        &broker,
        &broker.session(peer(6)),
        "TOKEN",
        t.token.into_bytes(),
    )
    .await;
    assert_eq!(code(&r), Some(ErrorCode::Unauthenticated));

    // A deleted user's session stops at its next request.
    let r = call(
        &broker,
        &Principal::Owner,
        Request::new(RequestBody::DeleteUser(pb::DeleteUserRequest {
            name: "alice".into(),
        })),
    )
    .await;
    assert_eq!(code(&r), None);
    let r = broker
        .handle_in(&session, sample(Kind::Fetch, "shop"))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::Unauthenticated));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_failures_close_an_address_even_to_the_right_password() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker).await;
    for _ in 0..5 {
        let r = step(
            &broker,
            &broker.session(peer(9)),
            "TOKEN",
            b"rill_wrong".to_vec(),
        )
        .await;
        assert_eq!(code(&r), Some(ErrorCode::Unauthenticated));
    }
    let closed = scram_login(&broker, &broker.session(peer(9)), "root", "root's password").await;
    let Err((ErrorCode::Unauthenticated, message)) = closed else {
        panic!("{closed:?}")
    };
    assert!(message.contains("too many failed attempts"), "{message}");
    // Another address is not affected.
    scram_login(
        &broker,
        &broker.session(peer(10)),
        "root",
        "root's password",
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_names_a_user_and_http_credentials_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker).await;

    // A certificate naming a user is that user; one naming nobody is nobody.
    let alice = broker.session_with_certificate(peer(1), "alice");
    assert_eq!(alice.principal(), user("alice"));
    let r = broker
        .handle_in(&alice, sample(Kind::ListStreams, "shop"))
        .await;
    assert_eq!(code(&r), None, "{r:?}");
    let r = broker
        .handle_in(&alice, sample(Kind::ListUsers, "shop"))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::PermissionDenied));
    let stranger = broker.session_with_certificate(peer(1), "stranger");
    assert_eq!(stranger.principal(), Principal::Unauthenticated);
    // A certified session may still authenticate as someone else by password.
    scram_login(&broker, &alice, "root", "root's password")
        .await
        .unwrap();
    assert_eq!(alice.principal(), user("root"));
    // Without --auth a certificate changes nothing.
    let open_dir = tempfile::tempdir().unwrap();
    let anonymous = Arc::new(Broker::open(BrokerConfig::new(open_dir.path())).unwrap());
    assert_eq!(
        anonymous
            .session_with_certificate(peer(1), "alice")
            .principal(),
        Principal::Anonymous
    );

    // HTTP: Basic against the Argon2id hash, Bearer against the tokens.
    let basic = |u: &str, p: &str| HttpCredential::basic(u, p);
    assert_eq!(
        broker
            .authenticate_http(peer(2), &basic("alice", "alice's password"))
            .unwrap(),
        user("alice")
    );
    let session = broker.session(peer(2));
    scram_login(&broker, &session, "alice", "alice's password")
        .await
        .unwrap();
    let made = expect_ok(
        broker
            .handle_in(
                &session,
                Request::new(RequestBody::CreateToken(pb::CreateTokenRequest {
                    name: "ci".into(),
                    expires_in_ms: None,
                })),
            )
            .await,
    );
    let ResponseBody::CreateToken(made) = made else {
        panic!("{made:?}")
    };
    let by_token = broker
        .authenticate_http(peer(2), &HttpCredential::bearer(made.token))
        .unwrap();
    assert!(matches!(by_token, Principal::User(a) if a.user == "alice"));
    for wrong in [
        basic("alice", "root's password"),
        basic("nobody", "alice's password"),
        HttpCredential::bearer("rill_not-a-token"),
    ] {
        let e = broker.authenticate_http(peer(3), &wrong).unwrap_err();
        assert_eq!(e.to_string(), "unauthenticated: authentication failed");
    }
    // The same limiter as the wire: five failures close the address.
    for _ in 0..2 {
        let _ = broker.authenticate_http(peer(3), &basic("alice", "x"));
    }
    let e = broker
        .authenticate_http(peer(3), &basic("alice", "alice's password"))
        .unwrap_err();
    assert!(e.to_string().contains("too many failed attempts"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_survive_a_restart_and_no_clear_secret_reaches_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let token;
    {
        let broker = open(dir.path());
        assert!(
            broker
                .bootstrap_admin(&Secret::new("first admin pw"))
                .unwrap()
        );
        assert!(
            !broker
                .bootstrap_admin(&Secret::new("another admin"))
                .unwrap(),
            "only once"
        );
        let session = broker.session(peer(1));
        scram_login(&broker, &session, "admin", "first admin pw")
            .await
            .unwrap();
        let r = broker
            .handle_in(
                &session,
                Request::new(RequestBody::CreateToken(pb::CreateTokenRequest {
                    name: "deploy".into(),
                    expires_in_ms: None,
                })),
            )
            .await;
        let Response::Ok {
            body: ResponseBody::CreateToken(t),
            ..
        } = r
        else {
            panic!("{r:?}")
        };
        token = t.token;
        broker.shutdown().unwrap();
    }
    let broker = open(dir.path());
    scram_login(&broker, &broker.session(peer(1)), "admin", "first admin pw")
        .await
        .unwrap();
    let r = step(
        &broker,
        &broker.session(peer(2)),
        "TOKEN",
        token.clone().into_bytes(),
    )
    .await;
    assert_eq!(code(&r), None, "{r:?}");
    broker.shutdown().unwrap();
    drop(broker);
    let auth_file = dir.path().join("auth.json");
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&auth_file), 0o600, "auth.json is its owner's alone");
    // One loosened by hand (or written by an older Rill) is restricted at the next open.
    std::fs::set_permissions(
        &auth_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    open(dir.path()).shutdown().unwrap();
    assert_eq!(mode(&auth_file), 0o600);
    for entry in walk(dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for secret in ["first admin pw", token.as_str()] {
            assert!(
                !text.contains(secret),
                "{} holds a secret in clear",
                entry.display()
            );
        }
    }
    // A damaged auth.json refuses the open instead of starting with no users.
    std::fs::write(dir.path().join("auth.json"), b"{\"version\":1,").unwrap();
    let mut config = BrokerConfig::new(dir.path());
    config.auth_required = true;
    let e = Broker::open(config).unwrap_err().to_string();
    assert!(e.contains("auth.json"), "{e}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn big_batch(bytes: usize) -> Bytes {
    let mut b = BatchBuilder::new();
    b.push(NewRecord::value(&vec![7u8; bytes])).unwrap();
    Bytes::from(b.finish().unwrap())
}

fn produce(payload: Bytes) -> Request {
    Request {
        body: RequestBody::Produce(pb::ProduceRequest {
            stream: "shop".into(),
            topic: "t".into(),
            partition: 0,
            ranged: false,
        }),
        payload,
    }
}

fn set_quota(user: &str, produce: Option<u64>, fetch: Option<u64>) -> Request {
    Request::new(RequestBody::SetQuota(pb::SetQuotaRequest {
        user: user.into(),
        produce_bytes_per_second: produce,
        fetch_bytes_per_second: fetch,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_over_its_quota_has_its_responses_held_back_and_the_metrics_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker).await;
    grant(
        &broker,
        "alice",
        "shop",
        &[pb::Permission::Read, pb::Permission::Write],
    )
    .await;
    grant(
        &broker,
        "bob",
        "shop",
        &[pb::Permission::Read, pb::Permission::Write],
    )
    .await;
    let owner = Principal::Owner;

    // Bad quotas are refused with a reason; a user's own or unknown user's is no admin's.
    let r = call(&broker, &owner, set_quota("alice", Some(10), None)).await;
    assert_eq!(code(&r), Some(ErrorCode::InvalidRequest), "{r:?}");
    let r = call(&broker, &owner, set_quota("nobody", Some(1 << 20), None)).await;
    assert_eq!(code(&r), Some(ErrorCode::InvalidRequest), "{r:?}");
    let r = call(&broker, &user("alice"), set_quota("alice", Some(0), None)).await;
    assert_eq!(code(&r), Some(ErrorCode::PermissionDenied), "{r:?}");

    // 64 KiB/s for produce and fetch. A field left out is kept; 0 removes it.
    const RATE: u64 = 64 * 1024;
    let ResponseBody::SetQuota(q) = expect_ok(
        call(
            &broker,
            &owner,
            set_quota("alice", Some(RATE), Some(7 * RATE)),
        )
        .await,
    ) else {
        panic!()
    };
    assert_eq!(q.quota.unwrap().fetch_bytes_per_second, 7 * RATE);
    let ResponseBody::SetQuota(q) =
        expect_ok(call(&broker, &owner, set_quota("alice", None, Some(RATE))).await)
    else {
        panic!()
    };
    let q = q.quota.unwrap();
    assert_eq!(
        (q.produce_bytes_per_second, q.fetch_bytes_per_second),
        (RATE, RATE)
    );

    // The first second's worth goes at once; 64 KiB more owes a second, and the
    // response comes no earlier.
    let payload = big_batch(RATE as usize - 200);
    let n = payload.len() as u64;
    expect_ok(call(&broker, &user("alice"), produce(payload.clone())).await);
    let started = std::time::Instant::now();
    expect_ok(call(&broker, &user("alice"), produce(payload.clone())).await);
    let held = started.elapsed();
    assert!(
        held >= std::time::Duration::from_millis(800),
        "held {held:?}"
    );

    // bob has no quota: not counted at all. The owner (embedded mode) never is.
    expect_ok(call(&broker, &user("bob"), produce(payload.clone())).await);
    expect_ok(call(&broker, &owner, produce(payload.clone())).await);

    // A fetch of the four batches (about 256 KiB) owes about three seconds.
    let fetch = Request::new(RequestBody::Fetch(pb::FetchRequest {
        stream: "shop".into(),
        topic: "t".into(),
        max_bytes: 1 << 20,
        ..Default::default()
    }));
    let started = std::time::Instant::now();
    let r = call(&broker, &user("alice"), fetch).await;
    let Response::Ok { payload: got, .. } = &r else {
        panic!("{r:?}")
    };
    let fetched = got.len() as u64;
    assert!(fetched >= 4 * n, "{fetched}");
    let held = started.elapsed();
    assert!(held >= std::time::Duration::from_secs(2), "held {held:?}");

    let usage = broker.quota_usage();
    let users: Vec<_> = usage
        .iter()
        .map(|u| (u.user.as_str(), u.kind.as_str()))
        .collect();
    assert_eq!(users, [("alice", "fetch"), ("alice", "produce")]);
    assert_eq!(usage[0].bytes, fetched);
    assert_eq!(usage[1].bytes, 2 * n);
    assert!(usage[0].throttled >= std::time::Duration::from_secs(2));
    assert!(usage[1].throttled >= std::time::Duration::from_millis(800));

    // The quota is stored and listed; removing it ends the throttling at once.
    broker.shutdown().unwrap();
    drop(broker);
    let broker = open(dir.path());
    let ResponseBody::ListUsers(list) = expect_ok(
        call(
            &broker,
            &owner,
            Request::new(RequestBody::ListUsers(pb::ListUsersRequest {})),
        )
        .await,
    ) else {
        panic!()
    };
    let alice = list.users.iter().find(|u| u.name == "alice").unwrap();
    assert_eq!(alice.quota.unwrap().produce_bytes_per_second, RATE);
    let bob = list.users.iter().find(|u| u.name == "bob").unwrap();
    assert_eq!(bob.quota.unwrap(), pb::Quota::default());
    expect_ok(call(&broker, &owner, set_quota("alice", Some(0), Some(0))).await);
    for _ in 0..3 {
        expect_ok(call(&broker, &user("alice"), produce(payload.clone())).await);
    }
    assert!(broker.quota_usage().is_empty());
}
