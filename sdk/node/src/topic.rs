//! A topic: admin, publish, and the readers, producers and consumers made from it.

use std::collections::BTreeMap;
use std::time::Duration;

use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;
use rill_client::{Durability, Offsets, Position, Topic, TopicOptions};

use crate::consumer::{ConsumerOptions, NativeConsumer};
use crate::convert::{
    Header, MessageIn, PackedPositions, PositionOut, config_json, description_json, group_json,
    headers_in, messages_in, offset_in, offset_out, packed_in, packed_positions, position_out,
    range_change_json,
};
use crate::error::{invalid_napi, to_napi};
use crate::group::{GroupOptions, NativeGroupConsumer};
use crate::producer::{NativeProducer, ProducerOptions};
use crate::reader::NativeReader;
use crate::runtime::{enter, spawn};

/// Options of `topic.create()`.
#[napi(object)]
#[derive(Debug, Default)]
pub struct CreateOptions {
    pub partitions: Option<u32>,
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
    pub segment_bytes: Option<i64>,
    pub durability: Option<String>,
    pub max_record_bytes: Option<u32>,
    pub replicas: Option<u32>,
    pub if_missing: Option<bool>,
    /// An elastic topic (docs/RANGES.md).
    pub elastic: Option<bool>,
    /// An elastic topic's automatic policy threshold, bytes per second.
    pub auto_split: Option<i64>,
    pub auto_split_window_ms: Option<i64>,
    pub auto_split_cooldown_ms: Option<i64>,
}

/// A topic of a stream (`rill_client::Topic`), its values raw bytes; the JS layer adds
/// codecs.
#[napi]
#[derive(Debug)]
pub struct NativeTopic {
    topic: Topic,
}

impl NativeTopic {
    pub(crate) fn new(topic: Topic) -> Self {
        Self { topic }
    }
}

fn non_negative(what: &str, n: Option<i64>) -> napi::Result<Option<u64>> {
    n.map(|n| offset_in(what, n)).transpose().map_err(to_napi)
}

#[napi]
impl NativeTopic {
    /// The stream's name.
    #[napi(getter)]
    pub fn stream(&self) -> String {
        self.topic.stream_name().to_owned()
    }

    /// The topic's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.topic.name().to_owned()
    }

    /// Creates the stream and topic if missing; the options as JSON.
    #[napi]
    pub fn ensure<'env>(
        &self,
        env: &'env Env,
        partitions: u32,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(config_json(&topic.ensure(partitions).await?).to_string())
        })
    }

    /// Creates the topic (and its stream) with options; the options as JSON.
    #[napi(catch_unwind)]
    pub fn create<'env>(
        &self,
        env: &'env Env,
        options: CreateOptions,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let durability = options
            .durability
            .map(|d| d.parse::<Durability>())
            .transpose()
            .map_err(|e| invalid_napi(e.to_string()))?;
        if options.partitions == Some(0) {
            return Err(invalid_napi("a topic needs at least one partition"));
        }
        let retention = non_negative("retentionMs", options.retention_ms)?;
        let window = non_negative("autoSplit.windowMs", options.auto_split_window_ms)?;
        let cooldown = non_negative("autoSplit.cooldownMs", options.auto_split_cooldown_ms)?;
        let auto_split = match non_negative("autoSplit.bytesPerS", options.auto_split)? {
            Some(rate) => {
                let mut a = rill_client::AutoSplit::new(rate);
                if let Some(ms) = window {
                    a = a.window(Duration::from_millis(ms));
                }
                if let Some(ms) = cooldown {
                    a = a.cooldown(Duration::from_millis(ms));
                }
                Some(a)
            }
            None if window.is_some() || cooldown.is_some() => {
                return Err(invalid_napi(
                    "autoSplit.windowMs and autoSplit.cooldownMs go with autoSplit.bytesPerS",
                ));
            }
            None => None,
        };
        let topic_options = TopicOptions {
            partitions: options.partitions,
            retention: retention.map(Duration::from_millis),
            retention_bytes: non_negative("retentionBytes", options.retention_bytes)?,
            segment_bytes: non_negative("segmentBytes", options.segment_bytes)?,
            durability,
            max_record_bytes: options.max_record_bytes,
            replicas: options.replicas,
            elastic: options.elastic.unwrap_or(false),
            auto_split,
        };
        let if_missing = options.if_missing.unwrap_or(false);
        let topic = self.topic.clone();
        spawn(env, async move {
            let config = topic.create_with(&topic_options, if_missing).await?;
            Ok(config_json(&config).to_string())
        })
    }

    /// Splits an open range of an elastic topic (absent: the busiest) at routing hash
    /// `at` (a decimal string, for all 64 bits; absent: its middle); what it did as JSON.
    #[napi]
    pub fn split_range<'env>(
        &self,
        env: &'env Env,
        range: Option<u32>,
        at: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let at = at
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| invalid_napi(format!("at must be a 64-bit hash, not {s:?}")))
            })
            .transpose()?;
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(range_change_json(&topic.split_range(range, at).await?).to_string())
        })
    }

    /// Merges two neighbouring open ranges of an elastic topic; what it did as JSON.
    #[napi]
    pub fn merge_ranges<'env>(
        &self,
        env: &'env Env,
        first: u32,
        second: u32,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(range_change_json(&topic.merge_ranges(first, second).await?).to_string())
        })
    }

    /// Deletes the topic, its data and its stored offsets.
    #[napi]
    pub fn delete<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let topic = self.topic.clone();
        spawn(env, async move { Ok(topic.delete().await?) })
    }

    /// Options and per-partition offsets, as JSON.
    #[napi]
    pub fn describe<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, String>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(description_json(&topic.describe().await?).to_string())
        })
    }

    /// The number of partitions.
    #[napi]
    pub fn partitions<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, u32>> {
        let topic = self.topic.clone();
        spawn(env, async move { Ok(topic.partitions().await?) })
    }

    /// The first stored offset of a partition.
    #[napi]
    pub fn first_offset<'env>(
        &self,
        env: &'env Env,
        partition: u32,
    ) -> napi::Result<PromiseRaw<'env, i64>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(offset_out(topic.first_offset(partition).await?))
        })
    }

    /// The offset the next record of a partition will get.
    #[napi]
    pub fn end_offset<'env>(
        &self,
        env: &'env Env,
        partition: u32,
    ) -> napi::Result<PromiseRaw<'env, i64>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(offset_out(topic.end_offset(partition).await?))
        })
    }

    /// The first offset at or after `timestampUs` (the end if none).
    #[napi]
    pub fn offset_for_time<'env>(
        &self,
        env: &'env Env,
        partition: u32,
        timestamp_us: i64,
    ) -> napi::Result<PromiseRaw<'env, i64>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(offset_out(
                topic.offset_for_time(partition, timestamp_us).await?,
            ))
        })
    }

    /// Publishes one record in one round trip. A key together with a partition, or an
    /// empty key, fails with `InvalidArgumentError` and sends nothing.
    #[napi(catch_unwind)]
    pub fn publish<'env>(
        &self,
        env: &'env Env,
        message: MessageIn,
        partition: Option<u32>,
    ) -> napi::Result<PromiseRaw<'env, PositionOut>> {
        let headers: Vec<Header> = message.headers.unwrap_or_default();
        let headers = headers_in(Some(headers))?;
        let mut publish = self
            .topic
            .publish()
            .value(bytes::Bytes::copy_from_slice(&message.value));
        if let Some(key) = message.key {
            publish = publish.key(bytes::Bytes::copy_from_slice(&key));
        }
        if let Some(p) = partition {
            publish = publish.partition(p);
        }
        for (name, value) in headers {
            publish = publish.header(name, value);
        }
        spawn(env, async move { Ok(position_out(publish.send().await?)) })
    }

    /// Publishes many records; keyed ones go to their key's partition, unkeyed ones all
    /// to one partition. Positions in input order.
    #[napi(catch_unwind)]
    pub fn publish_batch<'env>(
        &self,
        env: &'env Env,
        messages: Vec<MessageIn>,
    ) -> napi::Result<PromiseRaw<'env, Vec<PositionOut>>> {
        let messages = messages_in(messages)?;
        let topic = self.topic.clone();
        spawn(env, async move {
            let positions = topic.publish_batch(messages).await?;
            Ok(positions.into_iter().map(position_out).collect())
        })
    }

    /// `publishBatch` of messages without headers, packed by JS (`packed_in`).
    #[napi]
    pub fn publish_packed<'env>(
        &self,
        env: &'env Env,
        values: &[u8],
        value_lengths: &[u32],
        keys: Option<&[u8]>,
        key_lengths: Option<&[i32]>,
    ) -> napi::Result<PromiseRaw<'env, PackedPositions>> {
        let messages = packed_in(values, value_lengths, keys.zip(key_lengths))?;
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(packed_positions(topic.publish_batch(messages).await?))
        })
    }

    /// A cursor reader from `offsets` (`[partition, nextOffset]` pairs; the beginning
    /// where a partition is not named).
    #[napi(catch_unwind)]
    pub fn records(
        &self,
        name: String,
        offsets: Option<Vec<Vec<i64>>>,
        max_bytes: Option<u32>,
    ) -> napi::Result<NativeReader> {
        if let Some(problem) = rill_client::name_problem(&name) {
            return Err(invalid_napi(format!("reader name {name:?}: {problem}")));
        }
        let mut reader = self.topic.records(&name);
        if let Some(pairs) = offsets {
            let mut map = BTreeMap::new();
            for pair in pairs {
                let [p, o] = pair[..] else {
                    return Err(invalid_napi("offsets are [partition, offset] pairs"));
                };
                let p = u32::try_from(p)
                    .map_err(|_| invalid_napi(format!("partition {p} is not a u32")))?;
                map.insert(p, offset_in("an offset", o).map_err(to_napi)?);
            }
            reader = reader.from_offsets(Offsets(map));
        }
        if let Some(n) = max_bytes {
            if n == 0 {
                return Err(invalid_napi("maxBytes must be positive"));
            }
            reader = reader.max_bytes(n);
        }
        Ok(NativeReader::new(reader))
    }

    /// Builds a producer with these options.
    #[napi(catch_unwind)]
    pub fn producer<'env>(
        &self,
        env: &'env Env,
        options: Option<ProducerOptions>,
    ) -> napi::Result<PromiseRaw<'env, NativeProducer>> {
        let builder = crate::producer::builder(&self.topic, options.unwrap_or_default())?;
        spawn(env, async move {
            let producer = builder.build().await?;
            Ok(NativeProducer::new(producer))
        })
    }

    /// Builds a named consumer of one partition.
    #[napi(catch_unwind)]
    pub fn consumer<'env>(
        &self,
        env: &'env Env,
        name: String,
        partition: u32,
        options: Option<ConsumerOptions>,
    ) -> napi::Result<PromiseRaw<'env, NativeConsumer>> {
        let builder =
            crate::consumer::builder(&self.topic, &name, partition, options.unwrap_or_default())?;
        spawn(env, async move {
            let consumer = builder.build().await?;
            Ok(enter(|| NativeConsumer::new(consumer, partition)))
        })
    }

    /// Joins consumer group `group` (creating it unless `createGroup: false`).
    #[napi(catch_unwind)]
    pub fn consumer_group<'env>(
        &self,
        env: &'env Env,
        group: String,
        options: Option<GroupOptions>,
    ) -> napi::Result<PromiseRaw<'env, NativeGroupConsumer>> {
        let builder = crate::group::builder(&self.topic, &group, options.unwrap_or_default())?;
        spawn(env, async move {
            let consumer = builder.build().await?;
            Ok(NativeGroupConsumer::new(consumer, group))
        })
    }

    /// The last offset of `partition` stored as consumed by the named consumer `name`.
    #[napi]
    pub fn stored_offset<'env>(
        &self,
        env: &'env Env,
        name: String,
        partition: u32,
    ) -> napi::Result<PromiseRaw<'env, Option<i64>>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(topic.stored_offset(&name, partition).await?.map(offset_out))
        })
    }

    /// Stores the record at `offset` of `partition` as consumed by the named consumer.
    #[napi]
    pub fn store_offset<'env>(
        &self,
        env: &'env Env,
        name: String,
        partition: u32,
        offset: i64,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let offset = offset_in("offset", offset).map_err(to_napi)?;
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(topic
                .store_offset(&name, Position::new(partition, offset))
                .await?)
        })
    }

    /// A consumer group's generation, members and partitions, as JSON.
    #[napi]
    pub fn describe_group<'env>(
        &self,
        env: &'env Env,
        group: String,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(group_json(&topic.describe_group(&group).await?).to_string())
        })
    }

    /// Deletes a consumer group's stored offset of `partition`; whether one was stored.
    #[napi]
    pub fn delete_group_offset<'env>(
        &self,
        env: &'env Env,
        group: String,
        partition: u32,
    ) -> napi::Result<PromiseRaw<'env, bool>> {
        let topic = self.topic.clone();
        spawn(env, async move {
            Ok(topic.delete_group_offset(&group, partition).await?)
        })
    }
}
