//! The TCP transport of a client that may talk to a cluster (docs/REPLICATION.md §8):
//! one connection per node it has reached, the leader of each partition it has learnt,
//! the consumer groups' coordinator it has learnt, and a home node for everything else.
//!
//! A request for a partition (`Produce`, `Fetch`, `ResolveOffset`) goes to the node the
//! client last learnt leads it, and a group request (join, heartbeat, leave, commit,
//! delete an offset, describe, list groups, delete a group, reset its offsets) to the
//! coordinator it last learnt, else home. A `NOT_LEADER` answer that names the leader's
//! address sends the request there at once (and remembers it), for at most
//! [`HOPS_MAX`] hops; one that names none, or a node that cannot be reached, moves home
//! to the next address of the URL and tries there after a 50 ms pause, once per address;
//! then the caller gets the last answer (`NOT_LEADER` is transient: the client's own
//! retry budget, with its back-off, goes on from there, so an election is waited out). A request whose
//! connection broke after it was sent is not resent here: the caller decides, as
//! always (an idempotent produce is retried, a plain one is indeterminate); the next
//! request starts from another node. With one node, nothing of this costs more than a
//! lookup.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use rill_proto::{ErrorCode, Request, RequestBody, Response};

use crate::transport::{CallError, PushStream, Tcp, TcpOptions, Transport};

/// Redirects to a named leader one request follows at most.
pub(crate) const HOPS_MAX: usize = 5;
/// The pause before a request is tried on the next address.
const PAUSE: Duration = Duration::from_millis(50);
/// Nodes a client keeps connections to at most (the URL's and the leaders it learnt).
const LINKS_MAX: usize = 64;

/// What a request is routed by: its partition's leader, or the consumer groups'
/// coordinator (the metadata group's leader).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RouteKey {
    Partition(String, String, u32),
    Coordinator,
}

#[derive(Debug)]
struct State {
    /// Connections by address.
    links: HashMap<String, Arc<Tcp>>,
    /// Partition → its leader's address, as last learnt.
    leaders: HashMap<RouteKey, String>,
    /// Index into `seeds` of the home node.
    home: usize,
}

/// A client's transport over one or several nodes.
#[derive(Debug)]
pub(crate) struct Routed {
    seeds: Vec<String>,
    options: TcpOptions,
    state: Mutex<State>,
    closed: std::sync::atomic::AtomicBool,
}

fn route_of(body: &RequestBody) -> Option<RouteKey> {
    let partition = |stream: &str, topic: &str, p: u32| {
        Some(RouteKey::Partition(stream.to_owned(), topic.to_owned(), p))
    };
    match body {
        RequestBody::Produce(r) => partition(&r.stream, &r.topic, r.partition),
        RequestBody::Fetch(r) => partition(&r.stream, &r.topic, r.partition),
        RequestBody::ResolveOffset(r) => partition(&r.stream, &r.topic, r.partition),
        RequestBody::JoinGroup(_)
        | RequestBody::GroupHeartbeat(_)
        | RequestBody::LeaveGroup(_)
        | RequestBody::CommitGroupOffset(_)
        | RequestBody::DeleteGroupOffset(_)
        | RequestBody::DescribeGroup(_)
        | RequestBody::ListGroups(_)
        | RequestBody::DeleteGroup(_)
        | RequestBody::ResetGroupOffsets(_) => Some(RouteKey::Coordinator),
        _ => None,
    }
}

impl Routed {
    /// A transport that starts at the first of `seeds` (at least one).
    pub(crate) fn new(seeds: Vec<String>, options: TcpOptions) -> Self {
        assert!(!seeds.is_empty(), "a URL names at least one node");
        Self {
            seeds,
            options,
            state: Mutex::new(State {
                links: HashMap::new(),
                leaders: HashMap::new(),
                home: 0,
            }),
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn link(&self, addr: &str) -> Arc<Tcp> {
        let mut st = self.state.lock();
        if let Some(link) = st.links.get(addr) {
            return Arc::clone(link);
        }
        if st.links.len() >= LINKS_MAX {
            // Forget a learnt leader's connection that is no home (it reconnects when
            // needed).
            let seeds = &self.seeds;
            if let Some(old) = st.links.keys().find(|a| !seeds.contains(a)).cloned() {
                st.links.remove(&old);
            }
        }
        let link = Arc::new(Tcp::new(addr.to_owned(), self.options.clone()));
        st.links.insert(addr.to_owned(), Arc::clone(&link));
        link
    }

    /// Where a request goes first.
    fn target(&self, key: Option<&RouteKey>) -> String {
        let st = self.state.lock();
        key.and_then(|k| st.leaders.get(k).cloned())
            .unwrap_or_else(|| self.seeds[st.home].clone())
    }

    /// Moves home past `failed` (if it is home) and forgets it as a leader.
    fn avoid(&self, failed: &str, key: Option<&RouteKey>) -> String {
        let mut st = self.state.lock();
        if let Some(k) = key {
            st.leaders.remove(k);
        }
        st.leaders.retain(|_, a| a != failed);
        if self.seeds[st.home] == failed || key.is_some() {
            st.home = (st.home + 1) % self.seeds.len();
        }
        self.seeds[st.home].clone()
    }

    fn learn(&self, key: &RouteKey, addr: &str) {
        self.state
            .lock()
            .leaders
            .insert(key.clone(), addr.to_owned());
    }
}

impl Transport for Routed {
    fn call(&self, request: Request) -> BoxFuture<'_, Result<Response, CallError>> {
        Box::pin(async move {
            if self.closed.load(std::sync::atomic::Ordering::Acquire) {
                return Err(CallError::NotSent("the client was closed".into()));
            }
            let key = route_of(&request.body);
            let mut target = self.target(key.as_ref());
            let (mut hops, mut moves) = (0, 0);
            loop {
                let outcome = self.link(&target).call(request.clone()).await;
                let may_move = moves + 1 < self.seeds.len().max(2);
                match outcome {
                    Ok(Response::Err { ref error, .. })
                        if error.code == ErrorCode::NotLeader as i32 =>
                    {
                        match (&key, &error.leader_address) {
                            (Some(k), Some(addr)) if *addr != target && hops < HOPS_MAX => {
                                hops += 1;
                                self.learn(k, addr);
                                target = addr.clone();
                                continue;
                            }
                            _ if may_move => {
                                moves += 1;
                                target = self.avoid(&target, key.as_ref());
                            }
                            _ => return outcome,
                        }
                    }
                    Err(CallError::NotSent(_)) if may_move && self.seeds.len() > 1 => {
                        // That node is down or unreachable: another one.
                        moves += 1;
                        target = self.avoid(&target, key.as_ref());
                    }
                    Err(CallError::Lost(e)) => {
                        self.avoid(&target, key.as_ref());
                        return Err(CallError::Lost(e));
                    }
                    other => return other,
                }
                tokio::time::sleep(PAUSE).await;
            }
        })
    }

    fn peer(&self) -> String {
        self.seeds.join(",")
    }

    /// To the node the client last learnt leads the partition, else home; a node that
    /// does not lead it ends the stream with `NOT_LEADER`, and the subscriber reads by
    /// fetching (which follows leaders) instead.
    fn subscribe(
        &self,
        request: Request,
        capacity: usize,
    ) -> BoxFuture<'_, Result<Option<PushStream>, CallError>> {
        Box::pin(async move {
            if self.closed.load(std::sync::atomic::Ordering::Acquire) {
                return Err(CallError::NotSent("the client was closed".into()));
            }
            let key = match &request.body {
                RequestBody::Subscribe(r) => Some(RouteKey::Partition(
                    r.stream.clone(),
                    r.topic.clone(),
                    r.partition,
                )),
                _ => None,
            };
            let target = self.target(key.as_ref());
            self.link(&target).subscribe(request, capacity).await
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<(), crate::ClientError>> {
        Box::pin(async move {
            self.closed
                .store(true, std::sync::atomic::Ordering::Release);
            let links: Vec<Arc<Tcp>> = self.state.lock().links.values().cloned().collect();
            for link in links {
                link.close().await?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    //! The routing against fake nodes that speak the wire protocol: each answers by a
    //! rule of the test and records what it was asked.

    use std::sync::Arc;

    use bytes::BytesMut;
    use parking_lot::Mutex;
    use rill_proto::pb::{self, ErrorResponse};
    use rill_proto::{ErrorCode, FrameDecoder, ResponseBody};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    type Rule = Arc<dyn Fn(&RequestBody) -> Response + Send + Sync>;

    /// A fake node: its address and what it was asked (Hello aside), in order.
    struct Fake {
        addr: String,
        asked: Arc<Mutex<Vec<&'static str>>>,
    }

    fn name(body: &RequestBody) -> &'static str {
        match body {
            RequestBody::Produce(_) => "produce",
            RequestBody::JoinGroup(_) => "join",
            RequestBody::GroupHeartbeat(_) => "heartbeat",
            RequestBody::DescribeTopic(_) => "describe",
            _ => "other",
        }
    }

    async fn fake(rule: Rule) -> Fake {
        fake_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), rule)
    }

    fn fake_on(listener: TcpListener, rule: Rule) -> Fake {
        let addr = listener.local_addr().unwrap().to_string();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&asked);
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (rule, seen) = (Arc::clone(&rule), Arc::clone(&seen));
                tokio::spawn(async move {
                    let decoder = FrameDecoder::new(1 << 20);
                    let mut buf = BytesMut::new();
                    loop {
                        while let Ok(Some(frame)) = decoder.decode(&mut buf) {
                            let id = frame.correlation_id;
                            let request = Request::decode(frame).unwrap();
                            let response = match &request.body {
                                // The rule's own Hello answer, if it gives one.
                                RequestBody::Hello(_) => match rule(&request.body) {
                                    hello @ Response::Ok {
                                        body: ResponseBody::Hello(_),
                                        ..
                                    } => hello,
                                    _ => Response::ok(ResponseBody::Hello(
                                        pb::HelloResponse::default(),
                                    )),
                                },
                                body => {
                                    seen.lock().push(name(body));
                                    rule(body)
                                }
                            };
                            let out = response.encode(id).unwrap().to_bytes();
                            if stream.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                        if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                            return;
                        }
                    }
                });
            }
        });
        Fake { addr, asked }
    }

    fn ok(body: &RequestBody) -> Response {
        Response::ok(match body {
            RequestBody::Produce(_) => ResponseBody::Produce(pb::ProduceResponse::default()),
            RequestBody::JoinGroup(_) => ResponseBody::JoinGroup(pb::JoinGroupResponse::default()),
            RequestBody::GroupHeartbeat(_) => {
                ResponseBody::GroupHeartbeat(pb::GroupHeartbeatResponse::default())
            }
            _ => ResponseBody::DescribeTopic(pb::DescribeTopicResponse::default()),
        })
    }

    fn not_leader(body: &RequestBody, address: Option<&str>) -> Response {
        Response::Err {
            kind: body.kind() as u16,
            error: ErrorResponse {
                code: ErrorCode::NotLeader as i32,
                message: "not the leader".into(),
                offset: None,
                range_start: None,
                leader: address.map(|_| 9),
                leader_address: address.map(str::to_owned),
            },
        }
    }

    fn produce(partition: u32) -> Request {
        Request::new(RequestBody::Produce(pb::ProduceRequest {
            stream: "s".into(),
            topic: "t".into(),
            partition,
            ranged: false,
        }))
    }

    fn join() -> Request {
        Request::new(RequestBody::JoinGroup(pb::JoinGroupRequest {
            stream: "s".into(),
            topic: "t".into(),
            group: "g".into(),
            ..Default::default()
        }))
    }

    fn heartbeat() -> Request {
        Request::new(RequestBody::GroupHeartbeat(pb::GroupHeartbeatRequest {
            stream: "s".into(),
            topic: "t".into(),
            group: "g".into(),
            ..Default::default()
        }))
    }

    fn describe() -> Request {
        Request::new(RequestBody::DescribeTopic(pb::DescribeTopicRequest {
            stream: "s".into(),
            topic: "t".into(),
        }))
    }

    fn routed(seeds: &[&str]) -> Routed {
        Routed::new(
            seeds.iter().map(|s| (*s).to_owned()).collect(),
            TcpOptions {
                connect_timeout: Duration::from_secs(2),
                max_frame_bytes: 1 << 20,
                credentials: None,
                tls: None,
            },
        )
    }

    fn asked(f: &Fake) -> Vec<&'static str> {
        f.asked.lock().clone()
    }

    #[tokio::test]
    async fn a_leader_hint_is_followed_and_remembered_per_partition_and_for_the_coordinator() {
        // b leads partition 0, c coordinates groups; a (home) knows and says so.
        let b = fake(Arc::new(ok)).await;
        let c = fake(Arc::new(ok)).await;
        let (b_addr, c_addr) = (b.addr.clone(), c.addr.clone());
        let a = fake(Arc::new(move |body: &RequestBody| match body {
            RequestBody::Produce(r) if r.partition == 0 => not_leader(body, Some(&b_addr)),
            RequestBody::JoinGroup(_) | RequestBody::GroupHeartbeat(_) => {
                not_leader(body, Some(&c_addr))
            }
            _ => ok(body),
        }))
        .await;
        let r = routed(&[&a.addr, &b.addr, &c.addr]);
        for request in [
            produce(0),
            produce(0),
            join(),
            heartbeat(),
            produce(1),
            describe(),
        ] {
            let answer = r.call(request).await.unwrap();
            assert!(matches!(answer, Response::Ok { .. }), "{answer:?}");
        }
        // Partition 0 and the groups were asked of a once each, then of their nodes
        // directly; partition 1 and the rest stay home.
        assert_eq!(asked(&a), ["produce", "join", "produce", "describe"]);
        assert_eq!(asked(&b), ["produce", "produce"]);
        assert_eq!(asked(&c), ["join", "heartbeat"]);
    }

    #[tokio::test]
    async fn without_a_hint_or_with_a_node_down_the_client_moves_home_to_the_next_address() {
        let a = fake(Arc::new(|body: &RequestBody| not_leader(body, None))).await;
        let b = fake(Arc::new(ok)).await;
        // Nothing listens here (bound, then closed).
        let down = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap().to_string()
        };
        let r = routed(&[&down, &a.addr, &b.addr]);
        let answer = r.call(describe()).await.unwrap();
        assert!(matches!(answer, Response::Ok { .. }), "{answer:?}");
        assert_eq!(asked(&a), ["describe"]);
        // b is home now: the next request goes there first.
        r.call(describe()).await.unwrap();
        assert_eq!(asked(&a), ["describe"]);
        assert_eq!(asked(&b), ["describe", "describe"]);
    }

    #[tokio::test]
    async fn hints_that_go_round_in_a_circle_end_in_the_last_answer() {
        // a and b each name the other as the leader, for ever.
        let (la, lb) = (
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
        );
        let a_addr = la.local_addr().unwrap().to_string();
        let b_addr = lb.local_addr().unwrap().to_string();
        let to_b = b_addr.clone();
        let a = fake_on(
            la,
            Arc::new(move |body: &RequestBody| not_leader(body, Some(&to_b))),
        );
        let to_a = a_addr.clone();
        let b = fake_on(
            lb,
            Arc::new(move |body: &RequestBody| not_leader(body, Some(&to_a))),
        );
        let r = routed(&[&a.addr, &b.addr]);
        match r.call(produce(3)).await.unwrap() {
            Response::Err { error, .. } => assert_eq!(error.code, ErrorCode::NotLeader as i32),
            other => panic!("{other:?}"),
        }
        // Bounded: the first request, the hops, and a move home per address with its
        // own hops at most.
        let total = asked(&a).len() + asked(&b).len();
        assert!(total > HOPS_MAX, "it followed the hints: {total}");
        assert!(total <= 2 * (HOPS_MAX + 1), "{total} requests");
    }

    fn subscribe() -> Request {
        Request::new(RequestBody::Subscribe(pb::SubscribeRequest {
            stream: "s".into(),
            topic: "t".into(),
            partition: 0,
            offset: 0,
            credit_bytes: 1 << 20,
            credit_frames: 8,
        }))
    }

    /// A server that does not say it serves push streaming (an older one) is not sent a
    /// Subscribe: the caller gets `None` and fetches. One that says so but refuses the
    /// kind anyway ends the stream with `UNKNOWN_KIND` as its first frame.
    #[tokio::test]
    async fn subscriptions_go_only_to_servers_that_serve_them() {
        let old = fake(Arc::new(ok)).await;
        let t = routed(&[&old.addr]);
        assert!(t.subscribe(subscribe(), 8).await.unwrap().is_none());
        assert!(old.asked.lock().is_empty(), "{:?}", old.asked.lock());

        let claims = fake(Arc::new(|body: &RequestBody| match body {
            RequestBody::Hello(_) => Response::ok(ResponseBody::Hello(pb::HelloResponse {
                features: rill_proto::FEATURE_SUBSCRIBE,
                ..Default::default()
            })),
            other => Response::error(
                other.kind() as u16,
                ErrorCode::UnknownKind,
                "unknown request kind",
            ),
        }))
        .await;
        let t = routed(&[&claims.addr]);
        let mut stream = t.subscribe(subscribe(), 8).await.unwrap().expect("sent");
        match stream.frames.recv().await {
            Some(Ok(Response::Err { error, .. })) => {
                assert_eq!(error.code, ErrorCode::UnknownKind as i32);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            stream.frames.recv().await.is_none(),
            "the error was its last frame"
        );
    }
}
