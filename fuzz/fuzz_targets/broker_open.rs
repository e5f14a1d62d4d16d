//! Opening a broker on damaged files of its own: `catalog.json` (built from the input,
//! then byte-edited, or raw bytes) and the stored-offsets log under `offsets/` (records
//! with well-formed and malformed keys and values, written through the log engine, then
//! flipped, truncated or extended with garbage), plus leftovers of an interrupted
//! compaction and orphan topic directories.
//!
//! `Broker::open` must return `Ok` or a typed error, never panic or hang. Beyond that:
//! a catalog serde rejects, or of another version, is an error; a well-formed catalog
//! whose every topic's options validate, beside a sound offsets log, opens; after a
//! successful open the broker lists exactly the catalog's streams and topics with their
//! options and partition counts, has removed the orphan topic directories, and reports
//! the stored offsets that replaying the offsets log gives (last write wins; a value
//! that is not 8 bytes deletes; an undecodable key is skipped) — for a damaged log,
//! those of its intact batches (a damaged batch is skipped, later ones still count),
//! and the offsets log is not left failed; and a second open after `shutdown` agrees.
#![no_main]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rill_broker::{
    AutoSplit, Broker, BrokerConfig, StoredRange, StoredRanges, TopicConfig, validate_name,
};
use rill_proto::ranges::RangeMap;
use rill_format::{BatchBuilder, Durability, NewRecord};
use rill_storage::{LogConfig, ManualClock, PartitionLog, StdIo};
use serde::{Deserialize, Serialize};

/// `catalog.json` as `crates/rill-broker/src/catalog.rs` defines it: the same fields in
/// the same order, so serde accepts exactly what the broker accepts. Keep in step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct CatalogFile {
    version: u32,
    streams: BTreeMap<String, StreamFile>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct StreamFile {
    created_us: i64,
    topics: BTreeMap<String, TopicFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TopicFile {
    created_us: i64,
    config: TopicConfig,
}

/// Names the input picks from, so catalog, offsets and orphans meet.
const NAMES: &[&str] = &["shop", "orders", "a", "b.c", "x-1", "__y"];

/// Partitions opened at most per topic; more only makes an input slower.
const PARTITIONS_OPENED_MAX: u32 = 6;

#[derive(Arbitrary, Debug)]
enum Name<'a> {
    Known(u8),
    Any(&'a str),
}

impl Name<'_> {
    fn get(&self) -> String {
        match self {
            Self::Known(i) => NAMES[usize::from(*i) % NAMES.len()].to_owned(),
            Self::Any(s) => (*s).to_owned(),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct TopicIn<'a> {
    name: Name<'a>,
    created_us: i64,
    partitions: u8,
    retention_ms: Option<u64>,
    retention_bytes: Option<u64>,
    segment_bytes: Option<u64>,
    durability: u8,
    interval_ms: u64,
    max_record_bytes: Option<u32>,
    ranges: Option<RangesIn>,
    /// The automatic policy as stored: threshold, window, cooldown (any values: the
    /// catalog is checked at open).
    auto_split: Option<(u64, u64, u64)>,
}

/// An elastic topic's ranges: splits and merges of its initial ranges (a sound map,
/// whose ranges were sealed at 0 so their empty logs agree), or ranges as they come.
#[derive(Arbitrary, Debug)]
enum RangesIn {
    Changed(Vec<(u8, Option<u64>, bool)>),
    Raw(Vec<(u32, u64, u64, Vec<u32>, Option<u64>)>, u64),
}

impl TopicIn<'_> {
    fn config(&self) -> TopicConfig {
        let mut partitions = u32::from(self.partitions % 4);
        let ranges = self.ranges.as_ref().map(|r| match r {
            RangesIn::Changed(changes) => {
                let Ok(mut map) = RangeMap::initial(partitions) else {
                    return StoredRanges {
                        epoch: 0,
                        ranges: Vec::new(),
                        pending: None,
                    };
                };
                for &(pick, at, merge) in changes.iter().take(6) {
                    let open: Vec<u32> = map.open().map(|r| r.id).collect();
                    let i = usize::from(pick) % open.len();
                    let change = if merge {
                        open.get(i + 1).map(|&b| map.plan_merge(open[i], b))
                    } else {
                        Some(map.plan_split(open[i], at, 64))
                    };
                    if let Some(Ok(change)) = change {
                        let ends = vec![0; change.parents.len()];
                        map.apply(&change, &ends).unwrap();
                    }
                }
                partitions = map.ranges().len() as u32;
                StoredRanges::from_map(&map)
            }
            RangesIn::Raw(raw, epoch) => StoredRanges {
                epoch: *epoch,
                pending: None,
                ranges: raw
                    .iter()
                    .take(8)
                    .map(|(id, lo, hi, parents, sealed_at)| StoredRange {
                        id: *id,
                        lo: *lo,
                        hi: *hi,
                        parents: parents.clone(),
                        sealed_at: *sealed_at,
                    })
                    .collect(),
            },
        });
        TopicConfig {
            partitions,
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            segment_bytes: self.segment_bytes.unwrap_or(1 << 20),
            durability: match self.durability % 3 {
                0 => Durability::Always,
                1 => Durability::Never,
                _ => Durability::Interval(std::time::Duration::from_millis(self.interval_ms)),
            },
            max_record_bytes: self.max_record_bytes.unwrap_or(1 << 20),
            ranges,
            auto_split: self
                .auto_split
                .map(|(bytes_per_s, window_ms, cooldown_ms)| AutoSplit {
                    bytes_per_s,
                    window_ms,
                    cooldown_ms,
                }),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct StreamIn<'a> {
    name: Name<'a>,
    created_us: i64,
    topics: Vec<TopicIn<'a>>,
}

#[derive(Arbitrary, Debug)]
enum CatalogIn<'a> {
    Missing,
    Raw(&'a [u8]),
    Built {
        version: Option<u32>,
        streams: Vec<StreamIn<'a>>,
        flips: Vec<(u16, u8)>,
        cut: Option<u16>,
    },
}

#[derive(Arbitrary, Debug)]
enum KeyIn<'a> {
    Known {
        stream: u8,
        topic: u8,
        partition: u8,
        consumer: u8,
    },
    Raw(&'a [u8]),
}

#[derive(Arbitrary, Debug)]
enum ValueIn<'a> {
    Offset(u64),
    Other(&'a [u8]),
}

#[derive(Arbitrary, Debug)]
struct OffsetWrite<'a> {
    key: KeyIn<'a>,
    value: ValueIn<'a>,
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    catalog: CatalogIn<'a>,
    /// Offset records, grouped into batches.
    offsets: Vec<Vec<OffsetWrite<'a>>>,
    /// 0: in `offsets/`; 1: only in `offsets.compact/` (a compaction that crashed
    /// between its renames); 2 and 3: in `offsets/` beside a leftover `offsets.compact/`
    /// or `offsets.old/`.
    placement: u8,
    flips: Vec<(u16, u8)>,
    truncate_to: Option<u16>,
    garbage: &'a [u8],
    keep_recovery_point: bool,
    orphans: Vec<(u8, u8)>,
}

type OffsetMap = BTreeMap<(String, String, u32, String), u64>;

/// The key of a stored offset: `stream \0 topic \0 partition \0 consumer`.
fn decode_key(key: &[u8]) -> Option<(String, String, u32, String)> {
    let text = std::str::from_utf8(key).ok()?;
    let parts: Vec<&str> = text.split('\0').collect();
    let [stream, topic, partition, consumer] = parts[..] else {
        return None;
    };
    Some((
        stream.into(),
        topic.into(),
        partition.parse().ok()?,
        consumer.into(),
    ))
}

fn key_bytes(key: &KeyIn<'_>) -> Vec<u8> {
    match key {
        KeyIn::Known {
            stream,
            topic,
            partition,
            consumer,
        } => format!(
            "{}\0{}\0{}\0{}",
            NAMES[usize::from(*stream) % NAMES.len()],
            NAMES[usize::from(*topic) % NAMES.len()],
            partition % 4,
            NAMES[usize::from(*consumer) % NAMES.len()],
        )
        .into_bytes(),
        KeyIn::Raw(raw) => raw.to_vec(),
    }
}

fn value_bytes(value: &ValueIn<'_>) -> Vec<u8> {
    match value {
        ValueIn::Offset(o) => o.to_le_bytes().to_vec(),
        ValueIn::Other(raw) => raw.to_vec(),
    }
}

/// The stored offsets after replaying `batches`.
fn replay(batches: &[Vec<(Vec<u8>, Vec<u8>)>]) -> OffsetMap {
    let mut live = OffsetMap::new();
    for (key, value) in batches.iter().flatten() {
        let Some(key) = decode_key(key) else { continue };
        match <[u8; 8]>::try_from(&value[..]) {
            Ok(v) => {
                live.insert(key, u64::from_le_bytes(v));
            }
            Err(_) => {
                live.remove(&key);
            }
        }
    }
    live
}

/// Writes the offsets log the way the broker does (`crates/rill-broker/src/offsets.rs`),
/// with a fixed clock so the bytes depend on the input only. Returns each batch's byte
/// length in the segment (batches are stored back to back, as built).
fn write_offsets_log(dir: &Path, batches: &[Vec<(Vec<u8>, Vec<u8>)>]) -> Vec<usize> {
    let config = LogConfig {
        segment_bytes_max: 64 << 20,
        ..LogConfig::default()
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000_000_000));
    let log = PartitionLog::open_with(dir, config, Arc::new(StdIo), clock).unwrap();
    let mut lengths = Vec::with_capacity(batches.len());
    for records in batches {
        let mut builder = BatchBuilder::new();
        for (key, value) in records {
            builder.push(NewRecord::value(value).key(key)).unwrap();
        }
        let batch = builder.finish().unwrap();
        lengths.push(batch.len());
        log.append(&batch).unwrap();
    }
    log.close().unwrap();
    lengths
}

fn catalog_bytes(catalog: &CatalogIn<'_>) -> Option<Vec<u8>> {
    match catalog {
        CatalogIn::Missing => None,
        CatalogIn::Raw(raw) => Some(raw.to_vec()),
        CatalogIn::Built {
            version,
            streams,
            flips,
            cut,
        } => {
            let mut file = CatalogFile {
                version: version.unwrap_or(1),
                ..CatalogFile::default()
            };
            for s in streams.iter().take(4) {
                let topics = s
                    .topics
                    .iter()
                    .take(4)
                    .map(|t| {
                        (
                            t.name.get(),
                            TopicFile {
                                created_us: t.created_us,
                                config: t.config(),
                            },
                        )
                    })
                    .collect();
                file.streams.insert(
                    s.name.get(),
                    StreamFile {
                        created_us: s.created_us,
                        topics,
                    },
                );
            }
            let mut bytes = serde_json::to_vec_pretty(&file).unwrap();
            common::flip_bytes(&mut bytes, flips, 4);
            if let Some(cut) = cut {
                bytes.truncate(usize::from(*cut));
            }
            Some(bytes)
        }
    }
}

/// What the broker says it holds: streams with their topics' options and partition
/// counts, and every stored offset of the topics `keys` names.
type Listing = (
    Vec<(String, u32)>,
    Vec<(String, String, TopicConfig, usize)>,
    OffsetMap,
);

fn listing(broker: &Broker, keys: &BTreeSet<(String, String)>) -> Listing {
    let streams = broker.list_streams();
    let topics = broker
        .list_topics(None)
        .unwrap()
        .into_iter()
        .map(|(s, t, config)| {
            let (described, partitions) = broker.describe_topic(&s, &t).unwrap();
            assert_eq!(described, config);
            (s, t, config, partitions.len())
        })
        .collect();
    let mut offsets = OffsetMap::new();
    for (stream, topic) in keys {
        for (partition, consumer, offset) in broker.stored_offsets(stream, topic) {
            offsets.insert((stream.clone(), topic.clone(), partition, consumer), offset);
        }
    }
    (streams, topics, offsets)
}

fuzz_target!(|input: Input<'_>| {
    let scratch = common::scratch_dir();
    let data = scratch.path().join("data");
    std::fs::create_dir_all(&data).unwrap();

    // The offsets log.
    let batches: Vec<Vec<(Vec<u8>, Vec<u8>)>> = input
        .offsets
        .iter()
        .take(32)
        .filter(|b| !b.is_empty())
        .map(|b| {
            b.iter()
                .take(8)
                .map(|w| (key_bytes(&w.key), value_bytes(&w.value)))
                .collect()
        })
        .collect();
    let mut damaged = false;
    // Which batches still hold exactly the bytes they were written with, in place.
    let mut intact = vec![true; batches.len()];
    if !batches.is_empty() {
        let placement = input.placement % 4;
        let dir = data.join(if placement == 1 {
            "offsets.compact"
        } else {
            "offsets"
        });
        let lengths = write_offsets_log(&dir, &batches);
        let seg = dir.join("00000000000000000000.log");
        let clean = std::fs::read(&seg).unwrap();
        assert_eq!(
            lengths.iter().sum::<usize>(),
            clean.len(),
            "batches back to back"
        );
        let mut bytes = clean.clone();
        common::flip_bytes(&mut bytes, &input.flips, 4);
        if let Some(t) = input.truncate_to {
            bytes.truncate(usize::from(t));
        }
        bytes.extend_from_slice(input.garbage);
        damaged = bytes != clean;
        let mut start = 0;
        for (i, len) in lengths.iter().enumerate() {
            let end = start + len;
            intact[i] = bytes.get(start..end) == Some(&clean[start..end]);
            start = end;
        }
        std::fs::write(&seg, &bytes).unwrap();
        if !input.keep_recovery_point {
            std::fs::remove_file(dir.join("recovery-point")).unwrap();
        }
        if placement >= 2 {
            let leftover = data.join(if placement == 2 {
                "offsets.compact"
            } else {
                "offsets.old"
            });
            std::fs::create_dir_all(&leftover).unwrap();
            std::fs::write(
                leftover.join("00000000000000000000.log"),
                b"half a snapshot",
            )
            .unwrap();
        }
    }

    // Topic directories the catalog may or may not name.
    let mut orphans = BTreeSet::new();
    for &(s, t) in input.orphans.iter().take(4) {
        let (s, t) = (
            NAMES[usize::from(s) % NAMES.len()],
            NAMES[usize::from(t) % NAMES.len()],
        );
        let dir = data.join("streams").join(s).join(t);
        std::fs::create_dir_all(dir.join("0")).unwrap();
        std::fs::write(dir.join("junk"), b"left by a crashed create").unwrap();
        orphans.insert((s.to_owned(), t.to_owned()));
    }

    // The catalog.
    let bytes = catalog_bytes(&input.catalog);
    if let Some(bytes) = &bytes {
        std::fs::write(data.join("catalog.json"), bytes).unwrap();
    }
    let parsed: Option<CatalogFile> = match &bytes {
        None => Some(CatalogFile {
            version: 1,
            ..CatalogFile::default()
        }),
        Some(bytes) => serde_json::from_slice(bytes).ok(),
    };
    // A catalog whose names would leave the data directory, or whose options do not
    // validate, must be refused by `Broker::open` (it once created `DATA/../x`).
    // Topics with more partitions than a fuzz run can afford to open are skipped (the
    // catalog's bound, 4096, is validated like every other option).
    let mut must_refuse = false;
    if let Some(catalog) = &parsed {
        must_refuse = catalog.streams.iter().any(|(name, s)| {
            validate_name("stream", name).is_err()
                || s.topics.iter().any(|(name, t)| {
                    validate_name("topic", name).is_err() || t.config.validate().is_err()
                })
        });
        let too_big = catalog
            .streams
            .values()
            .flat_map(|s| s.topics.values())
            .any(|t| t.config.partitions > PARTITIONS_OPENED_MAX && t.config.validate().is_ok());
        if too_big && !must_refuse {
            return;
        }
    }

    let mut keys: BTreeSet<(String, String)> = NAMES
        .iter()
        .flat_map(|s| NAMES.iter().map(move |t| (s.to_string(), t.to_string())))
        .collect();
    let full = replay(&batches);
    keys.extend(full.keys().map(|(s, t, _, _)| (s.clone(), t.clone())));

    let opened = Broker::open(BrokerConfig::new(&data));
    if must_refuse {
        assert!(
            opened.is_err(),
            "a catalog with unsafe names or invalid options is refused"
        );
        assert!(
            !data.join("..").join("escaped").exists(),
            "nothing is created outside the data directory"
        );
        return;
    }
    let broker = match opened {
        Ok(broker) => broker,
        Err(e) => {
            let _ = e.to_string();
            let catalog_sound = parsed.as_ref().is_some_and(|c| {
                (c.version == 1 || c.version == 2)
                    && c.streams
                        .values()
                        .flat_map(|s| s.topics.values())
                        .all(|t| t.config.validate().is_ok())
            });
            assert!(
                !catalog_sound || (damaged && input.keep_recovery_point),
                "a sound catalog and offsets log must open: {e}"
            );
            return;
        }
    };
    let catalog = parsed.expect("an unparsable catalog is refused");
    assert!(
        catalog.version == 1 || catalog.version == 2,
        "another catalog version is refused"
    );

    let seen = listing(&broker, &keys);
    let (streams, topics, offsets) = &seen;
    let want_streams: Vec<(String, u32)> = catalog
        .streams
        .iter()
        .map(|(n, s)| (n.clone(), s.topics.len() as u32))
        .collect();
    assert_eq!(streams, &want_streams);
    let want_topics: Vec<(String, String, TopicConfig, usize)> = catalog
        .streams
        .iter()
        .flat_map(|(s, f)| {
            f.topics.iter().map(move |(t, f)| {
                (
                    s.clone(),
                    t.clone(),
                    f.config.clone(),
                    f.config.partitions as usize,
                )
            })
        })
        .collect();
    assert_eq!(topics, &want_topics);
    for (s, t) in &orphans {
        let named = catalog
            .streams
            .get(s)
            .is_some_and(|f| f.topics.contains_key(t));
        assert_eq!(
            data.join("streams").join(s).join(t).exists(),
            named,
            "orphan {s}/{t}"
        );
    }
    if damaged {
        // A damaged batch is skipped and later ones still count (the broker serves what
        // is intact around damage). Recovery cuts only a torn tail, and a tail is torn
        // only where the input truncated the file or appended garbage: no intact batch
        // is ever lost.
        let kept: Vec<Vec<(Vec<u8>, Vec<u8>)>> = batches
            .iter()
            .zip(&intact)
            .filter(|(_, ok)| **ok)
            .map(|(b, _)| b.clone())
            .collect();
        assert_eq!(
            offsets,
            &replay(&kept),
            "stored offsets are those of the intact batches, intact {intact:?}"
        );
    } else {
        assert_eq!(offsets, &full, "stored offsets replay the log");
    }
    // Damage in the offsets log loses its stores, never every later one.
    assert!(
        broker
            .failed_partitions()
            .iter()
            .all(|f| f.topic != "(stored offsets)"),
        "the offsets log takes stores after a damaged open: {:?}",
        broker.failed_partitions()
    );
    for leftover in ["offsets.compact", "offsets.old"] {
        assert!(!data.join(leftover).exists(), "{leftover} is cleaned up");
    }

    broker.shutdown().unwrap();
    drop(broker);
    let again = Broker::open(BrokerConfig::new(&data)).expect("a broker that opened reopens");
    assert_eq!(
        listing(&again, &keys),
        seen,
        "a second open agrees with the first"
    );
    again.shutdown().unwrap();
});
