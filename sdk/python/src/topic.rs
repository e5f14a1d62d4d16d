//! A topic: admin, publish, and the readers, producers and consumers made from it.

use std::collections::BTreeMap;
use std::time::Duration;

use pyo3::prelude::*;
use rill_client::{Durability, Offsets, Position, Topic, TopicOptions};

use crate::consumer::{ConsumerOptions, PyConsumer};
use crate::convert::{
    PackedPositions, PyRangeChange, PyRecord, PyTopicConfig, PyTopicDescription, headers_of,
    message_of, messages_of, position_out,
};
use crate::error::{invalid, to_py};
use crate::group::{GroupOptions, PyGroupConsumer};
use crate::producer::{ProducerOptions, PyProducer};
use crate::reader::PyReader;
use crate::runtime::spawn;

/// A topic of a stream (`rill_client::Topic`), its values raw bytes; the Python layer
/// adds codecs.
#[pyclass(frozen, module = "rill._native", name = "Topic")]
#[derive(Debug)]
pub(crate) struct PyTopic {
    pub(crate) topic: Topic,
}

impl PyTopic {
    pub(crate) fn new(topic: Topic) -> Self {
        Self { topic }
    }
}

#[pymethods]
impl PyTopic {
    /// The stream's name.
    #[getter]
    fn stream(&self) -> String {
        self.topic.stream_name().to_owned()
    }

    /// The topic's name.
    #[getter]
    fn name(&self) -> String {
        self.topic.name().to_owned()
    }

    /// Creates the stream and the topic with `partitions` partitions if missing; an
    /// existing topic with another partition count is an error that says so.
    fn ensure<'py>(&self, py: Python<'py>, partitions: u32) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            Ok(PyTopicConfig(topic.ensure(partitions).await?))
        })
    }

    /// Creates the topic (and its stream) with options; with `if_missing`, an existing
    /// topic whose options agree is fine.
    #[pyo3(signature = (
        *, partitions=None, retention_ms=None, retention_bytes=None, segment_bytes=None,
        durability=None, max_record_bytes=None, replicas=None, if_missing=false,
        elastic=false, auto_split=None, auto_split_window_ms=None,
        auto_split_cooldown_ms=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn create<'py>(
        &self,
        py: Python<'py>,
        partitions: Option<u32>,
        retention_ms: Option<u64>,
        retention_bytes: Option<u64>,
        segment_bytes: Option<u64>,
        durability: Option<String>,
        max_record_bytes: Option<u32>,
        replicas: Option<u32>,
        if_missing: bool,
        elastic: bool,
        auto_split: Option<u64>,
        auto_split_window_ms: Option<u64>,
        auto_split_cooldown_ms: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let durability = durability
            .map(|d| d.parse::<Durability>())
            .transpose()
            .map_err(|e| to_py(py, invalid(e.to_string())))?;
        if partitions == Some(0) {
            return Err(to_py(py, invalid("a topic needs at least one partition")));
        }
        if auto_split.is_none()
            && (auto_split_window_ms.is_some() || auto_split_cooldown_ms.is_some())
        {
            return Err(to_py(
                py,
                invalid("auto_split_window_ms and auto_split_cooldown_ms go with auto_split"),
            ));
        }
        let auto_split = auto_split.map(|rate| {
            let mut a = rill_client::AutoSplit::new(rate);
            if let Some(ms) = auto_split_window_ms {
                a = a.window(Duration::from_millis(ms));
            }
            if let Some(ms) = auto_split_cooldown_ms {
                a = a.cooldown(Duration::from_millis(ms));
            }
            a
        });
        let options = TopicOptions {
            partitions,
            retention: retention_ms.map(Duration::from_millis),
            retention_bytes,
            segment_bytes,
            durability,
            max_record_bytes,
            replicas,
            elastic,
            auto_split,
        };
        let topic = self.topic.clone();
        spawn(py, async move {
            Ok(PyTopicConfig(
                topic.create_with(&options, if_missing).await?,
            ))
        })
    }

    /// Deletes the topic, its data and its stored offsets.
    fn delete<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move { topic.delete().await })
    }

    /// Splits an open range of an elastic topic (`None`: the busiest) at `at` (`None`:
    /// its middle).
    #[pyo3(signature = (range=None, at=None))]
    fn split_range<'py>(
        &self,
        py: Python<'py>,
        range: Option<u32>,
        at: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            Ok(PyRangeChange(topic.split_range(range, at).await?))
        })
    }

    /// Merges two neighbouring open ranges of an elastic topic.
    fn merge_ranges<'py>(
        &self,
        py: Python<'py>,
        first: u32,
        second: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            Ok(PyRangeChange(topic.merge_ranges(first, second).await?))
        })
    }

    /// Options and per-partition offsets.
    fn describe<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            Ok(PyTopicDescription(topic.describe().await?))
        })
    }

    /// The number of partitions (cached after the first look-up).
    fn partitions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move { topic.partitions().await })
    }

    /// The first stored offset of a partition.
    fn first_offset<'py>(&self, py: Python<'py>, partition: u32) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move { topic.first_offset(partition).await })
    }

    /// The offset the next record of a partition will get.
    fn end_offset<'py>(&self, py: Python<'py>, partition: u32) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move { topic.end_offset(partition).await })
    }

    /// The first offset of a partition at or after `timestamp_us` (the end if none).
    fn offset_for_time<'py>(
        &self,
        py: Python<'py>,
        partition: u32,
        timestamp_us: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            topic.offset_for_time(partition, timestamp_us).await
        })
    }

    /// Publishes one record: one round trip. A key together with a partition, or an
    /// empty key, fails with `InvalidArgumentError` and sends nothing. Returns
    /// `(partition, offset)`.
    #[pyo3(signature = (value, *, key=None, partition=None, headers=None))]
    fn publish<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
        key: Option<&Bound<'py, PyAny>>,
        partition: Option<u32>,
        headers: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let message = message_of(value, key, None)?;
        let headers = headers_of(headers)?;
        let mut publish = self.topic.publish().value(message.value);
        if let Some(key) = message.key {
            publish = publish.key(key);
        }
        if let Some(p) = partition {
            publish = publish.partition(p);
        }
        for (name, value) in headers {
            publish = publish.header(name, value);
        }
        spawn(py, async move { Ok(position_out(publish.send().await?)) })
    }

    /// Publishes many `(value, key, headers)` messages: keyed ones to their key's
    /// partition, unkeyed ones all to one partition. Positions in input order.
    fn publish_batch<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let messages = messages_of(messages)?;
        let topic = self.topic.clone();
        spawn(py, async move {
            Ok(PackedPositions::new(topic.publish_batch(messages).await?))
        })
    }

    /// One fetch from a partition: `(records, next_offset, log_start, log_end)`.
    #[pyo3(signature = (partition, offset, *, max_bytes=1048576, max_wait_ms=0))]
    fn fetch<'py>(
        &self,
        py: Python<'py>,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait_ms: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            let f = topic
                .fetch(
                    Position::new(partition, offset),
                    max_bytes,
                    Duration::from_millis(max_wait_ms),
                )
                .await?;
            let records: Vec<PyRecord> = f.records.into_iter().map(PyRecord).collect();
            Ok((records, f.next_offset, f.log_start, f.log_end))
        })
    }

    /// A cursor reader from `offsets` (`{partition: next_offset}`; the beginning where
    /// a partition is not named).
    #[pyo3(signature = (name, offsets=None, max_bytes=None))]
    fn records(
        &self,
        name: &str,
        offsets: Option<BTreeMap<u32, u64>>,
        max_bytes: Option<u32>,
    ) -> PyResult<PyReader> {
        let mut reader = self.topic.records(name);
        if let Some(offsets) = offsets {
            reader = reader.from_offsets(Offsets(offsets));
        }
        if let Some(max_bytes) = max_bytes {
            reader = reader.max_bytes(max_bytes);
        }
        Ok(PyReader::new(reader))
    }

    /// A producer with these options; `init()` builds it.
    #[pyo3(signature = (**options))]
    fn producer<'py>(
        &self,
        py: Python<'py>,
        options: Option<&Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<PyProducer> {
        let options = ProducerOptions::from_py(py, options)?;
        Ok(PyProducer::new(self.topic.clone(), options))
    }

    /// A named consumer of one partition; `init()` builds it.
    #[pyo3(signature = (name, partition, **options))]
    fn consumer<'py>(
        &self,
        py: Python<'py>,
        name: String,
        partition: u32,
        options: Option<&Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<PyConsumer> {
        let options = ConsumerOptions::from_py(py, options)?;
        Ok(PyConsumer::new(
            self.topic.clone(),
            name,
            partition,
            options,
        ))
    }

    /// A member of consumer group `group`; `init()` joins.
    #[pyo3(signature = (group, **options))]
    fn consumer_group<'py>(
        &self,
        py: Python<'py>,
        group: String,
        options: Option<&Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<PyGroupConsumer> {
        let options = GroupOptions::from_py(py, options)?;
        Ok(PyGroupConsumer::new(self.topic.clone(), group, options))
    }

    /// The last offset of `partition` stored as consumed by the named consumer `name`.
    fn stored_offset<'py>(
        &self,
        py: Python<'py>,
        name: String,
        partition: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(
            py,
            async move { topic.stored_offset(&name, partition).await },
        )
    }

    /// Stores the record at `offset` of `partition` as consumed by the named consumer
    /// `name`.
    fn store_offset<'py>(
        &self,
        py: Python<'py>,
        name: String,
        partition: u32,
        offset: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            topic
                .store_offset(&name, Position::new(partition, offset))
                .await
        })
    }

    /// A consumer group's generation, members and partitions, as a dict.
    fn describe_group<'py>(&self, py: Python<'py>, group: String) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            Ok(crate::group::PyGroupDescription(
                topic.describe_group(&group).await?,
            ))
        })
    }

    /// Deletes a consumer group's stored offset of `partition` (the group must have no
    /// live members); whether one was stored.
    fn delete_group_offset<'py>(
        &self,
        py: Python<'py>,
        group: String,
        partition: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topic = self.topic.clone();
        spawn(py, async move {
            topic.delete_group_offset(&group, partition).await
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Topic(stream={:?}, name={:?})",
            self.topic.stream_name(),
            self.topic.name()
        )
    }
}
