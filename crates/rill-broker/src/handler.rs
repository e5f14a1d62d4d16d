//! Requests in, responses out: the one dispatch shared by the TCP server and the
//! embedded client transport, so both behave identically.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_format::BuiltBatch;
use rill_proto::pb::*;
use rill_proto::{PROTOCOL_VERSION, Request, RequestBody, Response, ResponseBody};

use crate::auth::Principal;
use crate::{Broker, BrokerError, Fetch};

impl Broker {
    /// Handles one request as the data directory's owner (embedded mode, which needs
    /// no credential). Never panics on bad input: every failure is an error response
    /// with a code.
    pub async fn handle(self: &Arc<Self>, request: Request) -> Response {
        self.handle_as(&Principal::Owner, request).await
    }

    /// Handles one request as `principal`: the one place it is authorized
    /// (docs/SECURITY.md §4), so the server and embedded mode cannot differ.
    pub async fn handle_as(self: &Arc<Self>, principal: &Principal, request: Request) -> Response {
        self.handle_with(principal, request, None).await
    }

    /// [`Broker::handle`] of a `Produce` whose payload this process built (embedded
    /// mode): if `built` is the request's payload, the batch's records and body
    /// checksum are not checked again (docs/FORMAT.md §3, "Batches built in-process").
    /// Any other payload is checked as usual.
    pub async fn handle_built(self: &Arc<Self>, request: Request, built: BuiltBatch) -> Response {
        self.handle_with(&Principal::Owner, request, Some(built))
            .await
    }

    async fn handle_with(
        self: &Arc<Self>,
        principal: &Principal,
        request: Request,
        built: Option<BuiltBatch>,
    ) -> Response {
        let kind = request.body.kind() as u16;
        let produced = match request.body {
            RequestBody::Produce(_) => Some(request.payload.len() as u64),
            _ => None,
        };
        let outcome = match self.auth.authorize(principal, &request.body) {
            Ok(()) => self.dispatch_as(principal, request, built).await,
            Err(e) => Err(e),
        };
        match outcome.map_err(|e| self.unless_behind(e)) {
            Ok((body, payload)) => {
                if let Principal::User(who) = principal {
                    let counted = match (&body, produced) {
                        (ResponseBody::Produce(_), Some(n)) => Some((crate::QuotaKind::Produce, n)),
                        (ResponseBody::Fetch(_), _) => {
                            Some((crate::QuotaKind::Fetch, payload.len() as u64))
                        }
                        _ => None,
                    };
                    if let Some((quota_kind, bytes)) = counted {
                        self.throttle(&who.user, quota_kind, bytes).await;
                    }
                }
                Response::Ok { body, payload }
            }
            Err(e) => Response::Err {
                kind,
                error: error_response(&e),
            },
        }
    }

    /// Counts a done request's bytes against the user's quota and holds its response
    /// back as long as the bucket says (docs/SECURITY.md §7). Users without that quota
    /// cost one read lock.
    async fn throttle(&self, user: &str, kind: crate::QuotaKind, bytes: u64) {
        let quota = self.auth.quota(user);
        let rate = match kind {
            crate::QuotaKind::Produce => quota.produce_bytes_per_second,
            crate::QuotaKind::Fetch => quota.fetch_bytes_per_second,
        };
        let Some(rate) = rate else { return };
        let delay = self
            .quotas
            .record(user, kind, rate, bytes, std::time::Instant::now(), |u| {
                self.auth.user_exists(u)
            });
        if !delay.is_zero() {
            tracing::debug!(
                user,
                kind = kind.as_str(),
                ?delay,
                "quota: response held back"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// Requests on users, tokens and ACLs are the credential store's; listings are
    /// cut to what a user may see; the rest is [`Broker::dispatch`].
    async fn dispatch_as(
        self: &Arc<Self>,
        principal: &Principal,
        request: Request,
        built: Option<BuiltBatch>,
    ) -> Result<(ResponseBody, Bytes), BrokerError> {
        if crate::auth::is_auth_request(&request.body) {
            let principal = principal.clone();
            let body = self
                .blocking(move |b| {
                    b.auth.admin(
                        b.config.io.as_ref(),
                        &b.config.data_dir,
                        &principal,
                        &request.body,
                    )
                })
                .await?;
            return Ok((body, Bytes::new()));
        }
        if let RequestBody::Authenticate(_) = request.body {
            return Err(BrokerError::InvalidRequest(
                "Authenticate is a step of a connection; embedded mode needs none".into(),
            ));
        }
        let (mut body, payload) = self.dispatch(request, built).await?;
        if matches!(principal, Principal::User(_)) {
            match &mut body {
                ResponseBody::ListStreams(r) => {
                    r.streams.retain(|s| self.auth.may_list(principal, &s.name));
                }
                ResponseBody::ListTopics(r) => {
                    r.topics
                        .retain(|t| self.auth.may_list(principal, &t.stream));
                }
                _ => {}
            }
        }
        Ok((body, payload))
    }

    async fn dispatch(
        self: &Arc<Self>,
        request: Request,
        built: Option<BuiltBatch>,
    ) -> Result<(ResponseBody, Bytes), BrokerError> {
        let none = Bytes::new();
        if self.is_clustered()
            && let Some(body) = self.dispatch_clustered(&request).await?
        {
            return Ok((body, none));
        }
        // A group request on a cluster node: the coordinator's, in order (held to the end).
        let _coordinating = if self.is_clustered() && is_group_request(&request.body) {
            Some(self.cluster_coordinate().await?)
        } else {
            None
        };
        let body = match request.body {
            RequestBody::Hello(r) => {
                if r.protocol_version != u32::from(PROTOCOL_VERSION) {
                    tracing::debug!(
                        client = r.client,
                        version = r.protocol_version,
                        "client speaks another protocol version"
                    );
                }
                ResponseBody::Hello(HelloResponse {
                    server: format!("rill {}", env!("CARGO_PKG_VERSION")),
                    protocol_version: u32::from(PROTOCOL_VERSION),
                    max_frame_bytes: self.config().max_frame_bytes,
                    max_batch_bytes: self.config().max_batch_bytes,
                    // Elastic topics are served on a single node and in a cluster
                    // (docs/RANGES.md §9); the server's connection adds what it serves
                    // (push streaming).
                    features: rill_proto::FEATURE_RANGES,
                })
            }
            RequestBody::CreateStream(r) => ResponseBody::CreateStream(CreateStreamResponse {
                created: self
                    .blocking(move |b| b.create_stream(&r.name, r.if_missing))
                    .await?,
            }),
            RequestBody::DeleteStream(r) => {
                self.blocking(move |b| b.delete_stream(&r.name)).await?;
                ResponseBody::DeleteStream(DeleteStreamResponse {})
            }
            RequestBody::ListStreams(_) => ResponseBody::ListStreams(ListStreamsResponse {
                streams: self
                    .list_streams()
                    .into_iter()
                    .map(|(name, topics)| StreamInfo { name, topics })
                    .collect(),
            }),
            RequestBody::CreateTopic(r) => {
                let options = r.options.unwrap_or_default();
                let (created, config) = self
                    .blocking(move |b| {
                        b.create_topic(&r.stream, &r.topic, &options, r.if_missing, r.create_stream)
                    })
                    .await?;
                ResponseBody::CreateTopic(CreateTopicResponse {
                    created,
                    options: Some(config.to_proto()),
                })
            }
            RequestBody::DeleteTopic(r) => {
                self.blocking(move |b| b.delete_topic(&r.stream, &r.topic))
                    .await?;
                ResponseBody::DeleteTopic(DeleteTopicResponse {})
            }
            RequestBody::ListTopics(r) => {
                let stream = (!r.stream.is_empty()).then_some(r.stream.as_str());
                ResponseBody::ListTopics(ListTopicsResponse {
                    topics: self
                        .list_topics(stream)?
                        .into_iter()
                        .map(|(stream, topic, config)| TopicSummary {
                            stream,
                            topic,
                            options: Some(config.to_proto()),
                        })
                        .collect(),
                })
            }
            RequestBody::DescribeTopic(r) => {
                let (config, partitions) = self.describe_topic(&r.stream, &r.topic)?;
                let (ranges, range_epoch) = config.ranges.as_ref().map_or_else(
                    || (Vec::new(), 0),
                    |stored| {
                        let rates = self.range_rates(&r.stream, &r.topic);
                        let ranges = stored
                            .ranges
                            .iter()
                            .map(|r| RangeInfo {
                                id: r.id,
                                lo: r.lo,
                                hi: r.hi,
                                parents: r.parents.clone(),
                                sealed_at: r.sealed_at,
                                bytes_per_s: r
                                    .sealed_at
                                    .is_none()
                                    .then(|| rates.get(&r.id).copied())
                                    .flatten(),
                            })
                            .collect();
                        (ranges, stored.epoch)
                    },
                );
                ResponseBody::DescribeTopic(DescribeTopicResponse {
                    stream: r.stream,
                    topic: r.topic,
                    options: Some(config.to_proto()),
                    partitions: partitions.into_iter().map(partition_info).collect(),
                    ranges,
                    range_epoch,
                })
            }
            RequestBody::InitProducer(_) => {
                let (producer_id, epoch) = self.init_producer();
                ResponseBody::InitProducer(InitProducerResponse {
                    producer_id,
                    producer_epoch: u32::from(epoch),
                    recent_batches: self.config().producer_batches_remembered as u32,
                })
            }
            RequestBody::Produce(r) => {
                // An elastic topic's range: the hashes its keys must have.
                let bounds = self.topic(&r.stream, &r.topic).ok().and_then(|t| {
                    let ranges = t.config.ranges.as_ref()?;
                    Some(
                        ranges
                            .ranges
                            .iter()
                            .find(|x| x.id == r.partition)
                            .map(|x| (x.lo, x.hi)),
                    )
                });
                if bounds.is_some() && !r.ranged {
                    return Err(BrokerError::InvalidRequest(format!(
                        "{}/{} is an elastic topic: it needs a client that routes records \
                         by its key ranges (docs/RANGES.md §4)",
                        r.stream, r.topic
                    )));
                }
                if let Some(Some((lo, hi))) = bounds {
                    check_range_keys(&request.payload, r.partition, lo, hi)?;
                }
                let produced = self
                    .produce_as(&r.stream, &r.topic, r.partition, request.payload, built)
                    .await?;
                ResponseBody::Produce(ProduceResponse {
                    base_offset: produced.base_offset,
                    last_offset: produced.last_offset,
                    timestamp_us: produced.timestamp_us,
                    duplicate: produced.duplicate,
                })
            }
            RequestBody::Fetch(r) => {
                let read = self
                    .fetch(
                        &r.stream,
                        &r.topic,
                        r.partition,
                        Fetch {
                            offset: r.offset,
                            max_bytes: r.max_bytes,
                            max_wait: Duration::from_millis(u64::from(r.max_wait_ms)),
                            min_bytes: r.min_bytes,
                        },
                    )
                    .await?;
                return Ok((
                    ResponseBody::Fetch(FetchResponse {
                        next_offset: read.next_offset,
                        log_start: read.log_start,
                        log_end: read.log_end,
                    }),
                    Bytes::from(read.bytes),
                ));
            }
            RequestBody::ResolveOffset(r) => {
                let spec = OffsetSpec::try_from(r.spec).map_err(|_| {
                    BrokerError::InvalidRequest(format!("unknown offset spec {}", r.spec))
                })?;
                // A timestamp lookup scans the log: off the runtime.
                let offset = if spec == OffsetSpec::Timestamp {
                    self.blocking(move |b| {
                        b.resolve_offset(&r.stream, &r.topic, r.partition, spec, r.timestamp_us)
                    })
                    .await?
                } else {
                    self.resolve_offset(&r.stream, &r.topic, r.partition, spec, r.timestamp_us)?
                };
                ResponseBody::ResolveOffset(ResolveOffsetResponse { offset })
            }
            RequestBody::StoreOffset(r) => {
                self.store_offset(&r.stream, &r.topic, r.partition, &r.consumer, r.offset)
                    .await?;
                ResponseBody::StoreOffset(StoreOffsetResponse {})
            }
            RequestBody::GetOffset(r) => {
                if self.is_clustered() {
                    // Not this node's view, which may be behind: the cluster's.
                    self.cluster_linearize().await?;
                }
                ResponseBody::GetOffset(GetOffsetResponse {
                    offset: self.get_offset(&r.stream, &r.topic, r.partition, &r.consumer)?,
                })
            }
            RequestBody::JoinGroup(r) => {
                let timeout = r
                    .session_timeout_ms
                    .map(|ms| Duration::from_millis(u64::from(ms)));
                let assignment = if r.create_group.unwrap_or(true) {
                    self.join_group(&r.stream, &r.topic, &r.group, &r.member_id, timeout)?
                } else {
                    self.join_existing_group(&r.stream, &r.topic, &r.group, &r.member_id, timeout)?
                };
                ResponseBody::JoinGroup(JoinGroupResponse {
                    assignment: Some(assignment),
                })
            }
            RequestBody::GroupHeartbeat(r) => {
                ResponseBody::GroupHeartbeat(GroupHeartbeatResponse {
                    assignment: Some(self.group_heartbeat(
                        &r.stream,
                        &r.topic,
                        &r.group,
                        &r.member_id,
                        &r.revoked,
                        &r.metrics,
                    )?),
                })
            }
            RequestBody::LeaveGroup(r) => {
                self.leave_group(&r.stream, &r.topic, &r.group, &r.member_id)?;
                ResponseBody::LeaveGroup(LeaveGroupResponse {})
            }
            RequestBody::CommitGroupOffset(r) => {
                self.commit_group_offset(&r).await?;
                ResponseBody::CommitGroupOffset(CommitGroupOffsetResponse {})
            }
            RequestBody::DeleteGroupOffset(r) => {
                ResponseBody::DeleteGroupOffset(DeleteGroupOffsetResponse {
                    deleted: self.delete_group_offset(&r).await?,
                })
            }
            RequestBody::DescribeGroup(r) => {
                ResponseBody::DescribeGroup(self.describe_group(&r.stream, &r.topic, &r.group)?)
            }
            RequestBody::RepairPartition(r) => {
                let state = self
                    .blocking(move |b| {
                        b.repair_partition(&r.stream, &r.topic, r.partition, r.accept_data_loss)
                    })
                    .await?;
                ResponseBody::RepairPartition(RepairPartitionResponse {
                    partition: Some(partition_info(state)),
                })
            }
            RequestBody::ClusterStatus(_) => {
                return Err(BrokerError::InvalidRequest(
                    "this server is a single node, not a cluster".into(),
                ));
            }
            // Served by a server's connection (rill-server), which keeps the
            // subscriptions; an embedded broker reads by Fetch.
            RequestBody::Subscribe(_) | RequestBody::Credit(_) | RequestBody::Unsubscribe(_) => {
                return Err(BrokerError::InvalidRequest(
                    "push streaming is served by a server's connection: read with Fetch".into(),
                ));
            }
            RequestBody::Authenticate(_)
            | RequestBody::CreateUser(_)
            | RequestBody::DeleteUser(_)
            | RequestBody::ListUsers(_)
            | RequestBody::SetPassword(_)
            | RequestBody::GrantAcl(_)
            | RequestBody::RevokeAcl(_)
            | RequestBody::CreateToken(_)
            | RequestBody::ListTokens(_)
            | RequestBody::RevokeToken(_)
            | RequestBody::SetQuota(_)
            | RequestBody::WhoAmI(_) => {
                return Err(BrokerError::Internal(
                    "a credential request reached the data dispatch".into(),
                ));
            }
            RequestBody::DeleteOffset(r) => ResponseBody::DeleteOffset(DeleteOffsetResponse {
                deleted: self
                    .delete_offset(&r.stream, &r.topic, r.partition, &r.consumer)
                    .await?,
            }),
            RequestBody::ListGroups(r) => {
                ResponseBody::ListGroups(self.list_groups(&r.stream, &r.topic, &r.after)?)
            }
            RequestBody::ListConsumers(r) => {
                if self.is_clustered() {
                    // Stored offsets as the cluster has them, not this node's view.
                    self.cluster_linearize().await?;
                }
                ResponseBody::ListConsumers(self.list_consumers(&r.stream, &r.topic, &r.after)?)
            }
            RequestBody::DeleteGroup(r) => ResponseBody::DeleteGroup(DeleteGroupResponse {
                offsets_deleted: self.delete_group(&r.stream, &r.topic, &r.group).await?,
            }),
            RequestBody::ResetGroupOffsets(r) => {
                ResponseBody::ResetGroupOffsets(ResetGroupOffsetsResponse {
                    offsets: self.reset_group_offsets(&r).await?,
                })
            }
            RequestBody::ResetConsumerOffsets(r) => {
                ResponseBody::ResetConsumerOffsets(ResetConsumerOffsetsResponse {
                    offsets: self.reset_consumer_offsets(&r).await?,
                })
            }
            RequestBody::PurgeTopic(r) => {
                let target = crate::purge::PurgeTarget::from_wire(&r)?;
                let starts = self
                    .blocking(move |b| b.purge_topic(&r.stream, &r.topic, r.partition, target))
                    .await?;
                ResponseBody::PurgeTopic(PurgeTopicResponse {
                    log_starts: starts
                        .into_iter()
                        .map(|(partition, start)| PartitionOffset {
                            partition,
                            offset: Some(start),
                        })
                        .collect(),
                })
            }
            RequestBody::AlterTopic(r) => {
                let changes = crate::alter::TopicChanges::from_proto(&r)?;
                let config = self
                    .blocking(move |b| b.alter_topic(&r.stream, &r.topic, &changes))
                    .await?;
                ResponseBody::AlterTopic(AlterTopicResponse {
                    options: Some(config.to_proto()),
                })
            }
            RequestBody::SplitRange(r) => {
                let change = self
                    .blocking(move |b| b.split_range(&r.stream, &r.topic, r.range, r.at))
                    .await?;
                ResponseBody::SplitRange(SplitRangeResponse {
                    change: Some(range_change(change)),
                })
            }
            RequestBody::MergeRanges(r) => {
                let change = self
                    .blocking(move |b| b.merge_ranges(&r.stream, &r.topic, r.first, r.second))
                    .await?;
                ResponseBody::MergeRanges(MergeRangesResponse {
                    change: Some(range_change(change)),
                })
            }
        };
        Ok((body, none))
    }
}

/// A split's or merge's answer.
fn range_change(change: crate::RangeChange) -> RangeChange {
    RangeChange {
        sealed: change
            .sealed
            .into_iter()
            .map(|(partition, end)| PartitionOffset {
                partition,
                offset: Some(end),
            })
            .collect(),
        opened: change.opened,
        epoch: change.epoch,
    }
}

/// Whether a request is a consumer group's (its coordinator answers it).
fn is_group_request(body: &RequestBody) -> bool {
    matches!(
        body,
        RequestBody::JoinGroup(_)
            | RequestBody::GroupHeartbeat(_)
            | RequestBody::LeaveGroup(_)
            | RequestBody::CommitGroupOffset(_)
            | RequestBody::DeleteGroupOffset(_)
            | RequestBody::DescribeGroup(_)
            | RequestBody::ListGroups(_)
            | RequestBody::DeleteGroup(_)
            | RequestBody::ResetGroupOffsets(_)
    )
}

impl Broker {
    /// The requests a cluster node answers otherwise than a single node: catalog
    /// changes go through the metadata group. `None` for the rest, which take the
    /// common path (group requests through `cluster_coordinate` first).
    async fn dispatch_clustered(
        self: &Arc<Self>,
        request: &Request,
    ) -> Result<Option<ResponseBody>, BrokerError> {
        Ok(Some(match &request.body {
            RequestBody::CreateStream(r) => ResponseBody::CreateStream(CreateStreamResponse {
                created: self.cluster_create_stream(&r.name, r.if_missing).await?,
            }),
            RequestBody::DeleteStream(r) => {
                self.cluster_delete_stream(&r.name).await?;
                ResponseBody::DeleteStream(DeleteStreamResponse {})
            }
            RequestBody::CreateTopic(r) => {
                let options = r.options.unwrap_or_default();
                let (created, config) = self
                    .cluster_create_topic(
                        &r.stream,
                        &r.topic,
                        &options,
                        r.if_missing,
                        r.create_stream,
                    )
                    .await?;
                ResponseBody::CreateTopic(CreateTopicResponse {
                    created,
                    options: Some(config.to_proto()),
                })
            }
            RequestBody::DeleteTopic(r) => {
                self.cluster_delete_topic(&r.stream, &r.topic).await?;
                ResponseBody::DeleteTopic(DeleteTopicResponse {})
            }
            RequestBody::RepairPartition(_) => {
                return Err(BrokerError::NotInCluster("repairing a partition"));
            }
            // An exact purge needs its start agreed by the partition's group and carried
            // by its snapshots (docs/REPLICATION.md §11.1): not done yet, so refused
            // rather than applied to one replica.
            RequestBody::PurgeTopic(_) => {
                return Err(BrokerError::NotInCluster("purging a topic's records"));
            }
            RequestBody::AlterTopic(r) => {
                let changes = crate::alter::TopicChanges::from_proto(r)?;
                let config = self
                    .cluster_alter_topic(&r.stream, &r.topic, &changes)
                    .await?;
                ResponseBody::AlterTopic(AlterTopicResponse {
                    options: Some(config.to_proto()),
                })
            }
            RequestBody::SplitRange(r) => {
                let change = self
                    .cluster_split_range_by(&r.stream, &r.topic, r.range, r.at, false)
                    .await?;
                ResponseBody::SplitRange(SplitRangeResponse {
                    change: Some(range_change(change)),
                })
            }
            RequestBody::MergeRanges(r) => {
                let change = self
                    .cluster_merge_ranges_by(&r.stream, &r.topic, r.first, r.second, false)
                    .await?;
                ResponseBody::MergeRanges(MergeRangesResponse {
                    change: Some(range_change(change)),
                })
            }
            RequestBody::ClusterStatus(_) => {
                let cluster = self
                    .cluster
                    .as_ref()
                    .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
                let status = cluster.status().await?;
                ResponseBody::ClusterStatus(ClusterStatusResponse {
                    nodes: status
                        .nodes
                        .into_iter()
                        .map(|n| ClusterNodeStatus {
                            id: n.id,
                            peer: n.peer,
                            client: n.client.unwrap_or_default(),
                            up: n.up,
                            controller: n.controller,
                        })
                        .collect(),
                    partitions: status
                        .partitions
                        .into_iter()
                        .map(|p| ClusterPartitionStatus {
                            stream: p.stream,
                            topic: p.topic,
                            partition: p.partition,
                            leader: p.leader,
                            replicas: p.replicas,
                            lag: p.lag.into_iter().collect(),
                            high_watermark: p.high_watermark,
                        })
                        .collect(),
                })
            }
            _ => return Ok(None),
        }))
    }

    /// Runs a request's blocking work (file I/O, fsyncs) on the blocking pool, never on
    /// a runtime worker, where a slow disk would stall unrelated connections.
    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Broker) -> Result<T, BrokerError> + Send + 'static,
    ) -> Result<T, BrokerError> {
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || work(&broker))
            .await
            .map_err(|e| BrokerError::Internal(format!("blocking task failed: {e}")))?
    }
}

/// The wire form of a partition's state.
fn partition_info(p: crate::PartitionState) -> PartitionInfo {
    PartitionInfo {
        partition: p.partition,
        first_offset: p.first_offset,
        next_offset: p.next_offset,
        size_bytes: p.size_bytes,
        segments: p.segments,
        failure: p.failure.unwrap_or_default(),
        damaged: p
            .damaged
            .iter()
            .map(|d| DamagedRange {
                from_offset: d.from_offset,
                to_offset: d.to_offset,
                segment: d
                    .segment
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                position: d.position,
                reason: d.reason.clone(),
                accepted: d.accepted,
            })
            .collect(),
    }
}

/// The wire form of a broker error.
pub(crate) fn error_response(e: &BrokerError) -> ErrorResponse {
    let (leader, leader_address) = e.leader();
    ErrorResponse {
        code: e.code() as i32,
        message: e.to_string(),
        offset: e.offset(),
        range_start: e.range_start(),
        leader,
        leader_address,
    }
}

/// Refuses a ranged produce holding a keyed record whose routing hash is outside its
/// range's `lo..=hi` (docs/RANGES.md §4): a range's bounds never change, so such a
/// record was routed wrong, and storing it would put its key's records in two ranges
/// that readers read independently. Unkeyed records may go to any open range. A batch
/// that does not parse is left to the append, which refuses it with its own error.
fn check_range_keys(batch: &[u8], range: u32, lo: u64, hi: u64) -> Result<(), BrokerError> {
    let mut outside = None;
    let parsed = rill_format::BatchView::parse_with(batch, |record| {
        if outside.is_none()
            && let Some(key) = record.key
        {
            let hash = rill_proto::ranges::key_hash(key);
            if hash < lo || hash > hi {
                outside = Some(hash);
            }
        }
    });
    match (parsed, outside) {
        (Ok(_), Some(hash)) => Err(BrokerError::InvalidRequest(format!(
            "a record's key hashes to {hash:#018x}, outside range {range} ({lo:#018x}..={hi:#018x}): \
             route each key to the open range covering its hash (docs/RANGES.md §2)"
        ))),
        _ => Ok(()),
    }
}
