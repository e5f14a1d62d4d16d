//! The catalog requests of the broker: streams and topics, created and deleted
//! write-ahead (the catalog file changes before memory does), listed and described.

use std::collections::BTreeMap;
use std::sync::Arc;

use rill_proto::pb;
use rill_storage::Clock;

use crate::broker::{PartitionState, Stream, Topic, open_topic, sync_dirs, topic_dir};
use crate::catalog::{StreamFile, TopicConfig, TopicFile, catalog_err};
use crate::names::validate_name;
use crate::partition::Partition;
use crate::{Broker, BrokerError};

impl Broker {
    /// Creates a stream. With `if_missing`, an existing stream is not an error.
    /// Returns whether it was created.
    pub fn create_stream(&self, name: &str, if_missing: bool) -> Result<bool, BrokerError> {
        self.check_running()?;
        validate_name("stream", name)?;
        let _admin = self.admin.lock();
        if self.read_streams().contains_key(name) {
            return if if_missing {
                Ok(false)
            } else {
                Err(BrokerError::StreamExists(name.to_owned()))
            };
        }
        let mut file = self.catalog_file();
        let created_us = self.clock.now_us();
        file.streams.insert(
            name.to_owned(),
            StreamFile {
                created_us,
                topics: BTreeMap::new(),
            },
        );
        // Write-ahead: the catalog on disk changes first, then the one in memory.
        self.save_catalog(&file)?;
        self.write_streams().insert(
            name.to_owned(),
            Stream {
                created_us,
                topics: BTreeMap::new(),
            },
        );
        tracing::info!(stream = name, "stream created");
        Ok(true)
    }

    /// Deletes a stream and every topic in it.
    pub fn delete_stream(&self, name: &str) -> Result<(), BrokerError> {
        self.check_running()?;
        let topics: Vec<String> = {
            let streams = self.read_streams();
            let stream = streams
                .get(name)
                .ok_or_else(|| BrokerError::StreamNotFound(name.to_owned()))?;
            stream.topics.keys().cloned().collect()
        };
        for topic in topics {
            self.delete_topic(name, &topic)?;
        }
        let _admin = self.admin.lock();
        let mut file = self.catalog_file();
        if file.streams.remove(name).is_none() {
            return Err(BrokerError::StreamNotFound(name.to_owned()));
        }
        self.save_catalog(&file)?;
        self.write_streams().remove(name);
        let dir = self.config.data_dir.join("streams").join(name);
        let io = self.env.io.as_ref();
        if io.exists(&dir) {
            io.remove_dir_all(&dir)
                .map_err(catalog_err("remove", &dir))?;
        }
        tracing::info!(stream = name, "stream deleted");
        Ok(())
    }

    /// Streams with their topic counts, by name.
    pub fn list_streams(&self) -> Vec<(String, u32)> {
        self.read_streams()
            .iter()
            .map(|(n, s)| (n.clone(), s.topics.len() as u32))
            .collect()
    }

    /// Creates a topic. With `if_missing`, an existing topic whose options agree with
    /// the requested ones is not an error; `create_stream` creates the stream too.
    /// Returns whether it was created and the topic's options.
    pub fn create_topic(
        &self,
        stream: &str,
        topic: &str,
        options: &pb::TopicOptions,
        if_missing: bool,
        create_stream: bool,
    ) -> Result<(bool, TopicConfig), BrokerError> {
        self.check_running()?;
        validate_name("stream", stream)?;
        validate_name("topic", topic)?;
        let config = TopicConfig::from_proto(options, self.config.default_durability)?;
        if create_stream {
            self.create_stream(stream, true)?;
        }
        let _admin = self.admin.lock();
        {
            let streams = self.read_streams();
            let s = streams
                .get(stream)
                .ok_or_else(|| BrokerError::StreamNotFound(stream.to_owned()))?;
            if let Some(existing) = s.topics.get(topic) {
                let conflicts = existing.config.conflicts(options);
                return if if_missing && conflicts.is_empty() {
                    Ok((false, existing.config.clone()))
                } else {
                    Err(BrokerError::TopicExists {
                        stream: stream.to_owned(),
                        topic: topic.to_owned(),
                        detail: if conflicts.is_empty() {
                            String::new()
                        } else {
                            format!(" and {}", conflicts.join(", "))
                        },
                    })
                };
            }
        }
        let created_us = self.clock.now_us();
        // Files first (a crash leaves an orphan directory, removed at the next open),
        // then the catalog on disk, then the catalog in memory.
        let opened = open_topic(
            &self.config,
            &self.env,
            &self.flusher,
            stream,
            topic,
            &config,
            created_us,
            true,
        )?;
        if let Some((p, reason)) = opened
            .partitions
            .iter()
            .enumerate()
            .find_map(|(i, p)| p.failure().map(|r| (i, r)))
        {
            let dir = topic_dir(&self.config.data_dir, stream, topic);
            let _ = self.env.io.remove_dir_all(&dir);
            return Err(BrokerError::PartitionUnavailable {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                partition: p as u32,
                reason,
            });
        }
        // The topic's directories, down from the data directory, are durable before the
        // catalog names the topic (each log syncs only its own parent).
        let topic_path = topic_dir(&self.config.data_dir, stream, topic);
        if let Err(e) = sync_dirs(self.env.io.as_ref(), &topic_path, &self.config.data_dir) {
            for p in &opened.partitions {
                let _ = p.close();
            }
            let _ = self.env.io.remove_dir_all(&topic_path);
            return Err(e);
        }
        let mut file = self.catalog_file();
        file.streams
            .get_mut(stream)
            .expect("checked above under the admin lock")
            .topics
            .insert(
                topic.to_owned(),
                TopicFile {
                    created_us,
                    config: config.clone(),
                },
            );
        if let Err(e) = self.save_catalog(&file) {
            for p in &opened.partitions {
                let _ = p.close();
            }
            let dir = topic_dir(&self.config.data_dir, stream, topic);
            let _ = self.env.io.remove_dir_all(&dir);
            return Err(e);
        }
        self.write_streams()
            .get_mut(stream)
            .expect("checked above under the admin lock")
            .topics
            .insert(topic.to_owned(), Arc::new(opened));
        tracing::info!(
            stream,
            topic,
            partitions = config.partitions,
            "topic created"
        );
        Ok((true, config))
    }

    /// Deletes a topic, its data and its stored offsets. Write-ahead: the catalog
    /// without the topic is saved first (on a full disk, into the reserved space), so
    /// a failure leaves the topic as it was, and a crash after it leaves only files
    /// that the next open removes.
    pub fn delete_topic(&self, stream: &str, topic: &str) -> Result<(), BrokerError> {
        self.check_running()?;
        let _admin = self.admin.lock();
        let mut file = self.catalog_file();
        let removed_from_file = file
            .streams
            .get_mut(stream)
            .ok_or_else(|| BrokerError::StreamNotFound(stream.to_owned()))?
            .topics
            .remove(topic);
        if removed_from_file.is_none() {
            return Err(BrokerError::TopicNotFound {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
            });
        }
        self.save_catalog(&file)?;
        let removed = self
            .write_streams()
            .get_mut(stream)
            .and_then(|s| s.topics.remove(topic))
            .expect("present under the admin lock");
        for partition in &removed.partitions {
            // A partition whose log failed stays poisoned; its files go anyway.
            if let Err(e) = partition.close() {
                tracing::warn!(error = %e, "closing a deleted topic's partition");
            }
        }
        let dir = topic_dir(&self.config.data_dir, stream, topic);
        let io = self.env.io.as_ref();
        if io.exists(&dir) {
            io.remove_dir_all(&dir)
                .map_err(catalog_err("remove", &dir))?;
        }
        self.groups.forget_topic(stream, topic);
        for (key, _) in self.offsets.for_topic(stream, topic) {
            if let Err(e) = self.offsets.delete(key) {
                // The topic is gone; a stored offset left behind names nothing and is
                // dropped by the next compaction.
                tracing::warn!(error = %e, "deleting a deleted topic's stored offset");
            }
        }
        // Space was freed: take the reserve back if it was used.
        self.reserve.ensure();
        tracing::info!(stream, topic, "topic deleted");
        Ok(())
    }

    /// Topics of one stream (or of all, with `None`), with their options.
    pub fn list_topics(
        &self,
        stream: Option<&str>,
    ) -> Result<Vec<(String, String, TopicConfig)>, BrokerError> {
        let streams = self.read_streams();
        if let Some(name) = stream
            && !streams.contains_key(name)
        {
            return Err(BrokerError::StreamNotFound(name.to_owned()));
        }
        Ok(streams
            .iter()
            .filter(|(n, _)| stream.is_none_or(|s| s == n.as_str()))
            .flat_map(|(n, s)| {
                s.topics
                    .iter()
                    .map(|(t, topic)| (n.clone(), t.clone(), topic.config.clone()))
            })
            .collect())
    }

    pub(crate) fn topic(&self, stream: &str, topic: &str) -> Result<Arc<Topic>, BrokerError> {
        let streams = self.read_streams();
        let s = streams
            .get(stream)
            .ok_or_else(|| BrokerError::StreamNotFound(stream.to_owned()))?;
        s.topics
            .get(topic)
            .cloned()
            .ok_or_else(|| BrokerError::TopicNotFound {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
            })
    }

    pub(crate) fn partition(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Arc<Partition>, BrokerError> {
        let t = self.topic(stream, topic)?;
        t.partitions
            .get(partition as usize)
            .cloned()
            .ok_or_else(|| BrokerError::PartitionNotFound {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                partition,
                partitions: t.config.partitions,
            })
    }

    /// A topic's options and per-partition state.
    pub fn describe_topic(
        &self,
        stream: &str,
        topic: &str,
    ) -> Result<(TopicConfig, Vec<PartitionState>), BrokerError> {
        let t = self.topic(stream, topic)?;
        let partitions = t
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| match p.log() {
                Ok(log) => PartitionState {
                    partition: i as u32,
                    first_offset: log.log_start(),
                    next_offset: p.visible_end().unwrap_or_else(|_| log.next_offset()),
                    size_bytes: log.size_bytes(),
                    segments: log.segment_count() as u32,
                    failure: p.failure(),
                    damaged: log.damage(),
                },
                Err(e) => PartitionState {
                    partition: i as u32,
                    first_offset: 0,
                    next_offset: 0,
                    size_bytes: 0,
                    segments: 0,
                    failure: Some(e.to_string()),
                    damaged: Vec::new(),
                },
            })
            .collect();
        Ok((t.config.clone(), partitions))
    }
}
