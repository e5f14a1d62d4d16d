//! The persisted catalog: streams, topics and their options, in `catalog.json`, replaced
//! atomically (write a temporary file, fsync, rename, fsync the directory).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rill_proto::pb;
use rill_proto::ranges::{Change, Range, RangeError, RangeMap};
use rill_storage::{Durability, Io, LogConfig};
use serde::{Deserialize, Serialize};

use crate::BrokerError;
use crate::names::validate_name;

/// Most partitions a topic may have.
pub(crate) const PARTITIONS_MAX: u32 = 4096;
/// Default segment size.
pub(crate) const SEGMENT_BYTES_DEFAULT: u64 = 1 << 30;
/// Default largest record.
pub(crate) const RECORD_BYTES_DEFAULT: u32 = 1 << 20;

/// The catalog's form of a [`Durability`] (`"always"`, `{"interval":{"ms":N}}`,
/// `"never"`), kept as it was written by earlier versions.
mod durability_serde {
    use std::time::Duration;

    use rill_storage::Durability;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Stored {
        Always,
        Interval { ms: u64 },
        Never,
    }

    pub(super) fn serialize<S: Serializer>(d: &Durability, s: S) -> Result<S::Ok, S::Error> {
        match *d {
            Durability::Always => Stored::Always,
            Durability::Never => Stored::Never,
            Durability::Interval(_) => Stored::Interval {
                ms: d.interval_ms().unwrap_or(0),
            },
        }
        .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Durability, D::Error> {
        Ok(match Stored::deserialize(d)? {
            Stored::Always => Durability::Always,
            Stored::Never => Durability::Never,
            Stored::Interval { ms } => Durability::Interval(Duration::from_millis(ms)),
        })
    }
}

/// Options of a topic (all partitions share them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Number of partitions.
    pub partitions: u32,
    /// Delete sealed segments whose newest record is older than this.
    pub retention_ms: Option<u64>,
    /// Per partition: delete the oldest sealed segments beyond this size.
    pub retention_bytes: Option<u64>,
    /// Segment size.
    pub segment_bytes: u64,
    /// Durability policy.
    #[serde(with = "durability_serde")]
    pub durability: Durability,
    /// Largest record accepted.
    pub max_record_bytes: u32,
    /// An elastic topic's key ranges (docs/RANGES.md): one per partition, by id. `None`
    /// for other topics. Absent from catalogs written before elastic topics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<StoredRanges>,
    /// An elastic topic's automatic policy (docs/RANGES.md §7); `None`: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_split: Option<AutoSplit>,
}

/// An elastic topic's automatic split and merge policy (docs/RANGES.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoSplit {
    /// Split an open range whose write rate stays above this for a whole window.
    pub bytes_per_s: u64,
    /// The window, in ms.
    pub window_ms: u64,
    /// No range younger than this is touched, in ms (at least two windows).
    pub cooldown_ms: u64,
}

/// The policy's default window.
pub(crate) const AUTO_SPLIT_WINDOW_MS_DEFAULT: u64 = 60_000;
/// The policy's default cooldown (raised to two windows when they are longer).
pub(crate) const AUTO_SPLIT_COOLDOWN_MS_DEFAULT: u64 = 300_000;
/// The policy's window bounds: a second to a day.
const AUTO_SPLIT_WINDOW_MS: std::ops::RangeInclusive<u64> = 1_000..=86_400_000;
/// The longest cooldown: a week.
const AUTO_SPLIT_COOLDOWN_MS_MAX: u64 = 7 * 86_400_000;

impl AutoSplit {
    /// The policy at `bytes_per_s` with a window and cooldown, each defaulted if absent.
    pub fn new(bytes_per_s: u64, window_ms: Option<u64>, cooldown_ms: Option<u64>) -> Self {
        let window_ms = window_ms.unwrap_or(AUTO_SPLIT_WINDOW_MS_DEFAULT);
        Self {
            bytes_per_s,
            window_ms,
            cooldown_ms: cooldown_ms
                .unwrap_or_else(|| AUTO_SPLIT_COOLDOWN_MS_DEFAULT.max(window_ms.saturating_mul(2))),
        }
    }
}

/// An elastic topic's range map as the catalog stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRanges {
    /// Splits and merges so far.
    pub epoch: u64,
    /// The ranges, by id.
    pub ranges: Vec<StoredRange>,
    /// In a cluster: the split or merge under way (docs/RANGES.md §9). Never set on a
    /// single node, where a change is one catalog write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingChange>,
}

/// A split or merge under way in a cluster (docs/RANGES.md §9): planned in the
/// catalog, then each parent sealed in its own group and its end recorded here; the
/// change applies once every parent's end is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingChange {
    /// The map's epoch it was planned against.
    pub epoch: u64,
    /// The ranges it seals, in id order.
    pub parents: Vec<u32>,
    /// The new ranges' bounds, in hash order.
    pub children: Vec<(u64, u64)>,
    /// Per parent, where its group sealed it, once it did.
    pub ends: Vec<Option<u64>>,
}

impl PendingChange {
    /// The change as planned.
    pub fn change(&self) -> Change {
        Change {
            epoch: self.epoch,
            parents: self.parents.clone(),
            children: self.children.clone(),
        }
    }
}

/// One range in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRange {
    /// Its partition number.
    pub id: u32,
    /// First hash.
    pub lo: u64,
    /// Last hash (inclusive).
    pub hi: u64,
    /// The ranges it came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<u32>,
    /// Where it was sealed, once sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_at: Option<u64>,
}

impl StoredRanges {
    /// The catalog's form of a map.
    pub fn from_map(map: &RangeMap) -> Self {
        Self {
            epoch: map.epoch(),
            ranges: map
                .ranges()
                .iter()
                .map(|r| StoredRange {
                    id: r.id,
                    lo: r.lo,
                    hi: r.hi,
                    parents: r.parents.clone(),
                    sealed_at: r.sealed,
                })
                .collect(),
            pending: None,
        }
    }

    /// The map, checked whole (it comes from a file).
    pub fn to_map(&self) -> Result<RangeMap, RangeError> {
        RangeMap::from_ranges(
            self.ranges
                .iter()
                .map(|r| Range {
                    id: r.id,
                    lo: r.lo,
                    hi: r.hi,
                    parents: r.parents.clone(),
                    sealed: r.sealed_at,
                })
                .collect(),
            self.epoch,
        )
    }
}

impl TopicConfig {
    /// Options with every default and `partitions` partitions.
    pub fn with_partitions(partitions: u32, durability: Durability) -> Self {
        Self {
            partitions,
            retention_ms: None,
            retention_bytes: None,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            durability,
            max_record_bytes: RECORD_BYTES_DEFAULT,
            ranges: None,
            auto_split: None,
        }
    }

    /// An elastic topic's range map (`None` for other topics). Checked when the config
    /// was validated, so only a config built by hand can fail here.
    pub fn range_map(&self) -> Option<RangeMap> {
        self.ranges.as_ref().and_then(|r| r.to_map().ok())
    }

    /// Builds options from a request, filling defaults; fails on out-of-range values.
    pub fn from_proto(
        o: &pb::TopicOptions,
        default_durability: Durability,
    ) -> Result<Self, BrokerError> {
        let durability = match pb::Durability::try_from(o.durability) {
            Ok(pb::Durability::Unspecified) => default_durability,
            Ok(pb::Durability::Always) => Durability::Always,
            Ok(pb::Durability::Never) => Durability::Never,
            Ok(pb::Durability::Interval) => Durability::Interval(Duration::from_millis(
                o.durability_interval_ms.ok_or_else(|| {
                    BrokerError::InvalidConfig("interval durability needs an interval in ms".into())
                })?,
            )),
            Err(_) => {
                return Err(BrokerError::InvalidConfig(format!(
                    "unknown durability {}",
                    o.durability
                )));
            }
        };
        let partitions = if o.partitions == 0 { 1 } else { o.partitions };
        let ranges = if o.elastic {
            let map = RangeMap::initial(partitions)
                .map_err(|e| BrokerError::InvalidConfig(e.to_string()))?;
            Some(StoredRanges::from_map(&map))
        } else {
            None
        };
        let auto_split = match o.auto_split {
            Some(rate) => Some(AutoSplit::new(
                rate,
                o.auto_split_window_ms,
                o.auto_split_cooldown_ms,
            )),
            None if o.auto_split_window_ms.is_some() || o.auto_split_cooldown_ms.is_some() => {
                return Err(BrokerError::InvalidConfig(
                    "auto_split_window_ms and auto_split_cooldown_ms go with auto_split".into(),
                ));
            }
            None => None,
        };
        let config = Self {
            partitions,
            retention_ms: o.retention_ms,
            retention_bytes: o.retention_bytes,
            segment_bytes: o.segment_bytes.unwrap_or(SEGMENT_BYTES_DEFAULT),
            durability,
            max_record_bytes: o.max_record_bytes.unwrap_or(RECORD_BYTES_DEFAULT),
            ranges,
            auto_split,
        };
        config.validate()?;
        Ok(config)
    }

    /// The options as sent on the wire.
    pub fn to_proto(&self) -> pb::TopicOptions {
        let (durability, interval) = match self.durability {
            Durability::Always => (pb::Durability::Always, None),
            Durability::Interval(_) => (pb::Durability::Interval, self.durability.interval_ms()),
            Durability::Never => (pb::Durability::Never, None),
        };
        pb::TopicOptions {
            partitions: self.partitions,
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            segment_bytes: Some(self.segment_bytes),
            durability: durability as i32,
            durability_interval_ms: interval,
            max_record_bytes: Some(self.max_record_bytes),
            replicas: None,
            elastic: self.ranges.is_some(),
            auto_split: self.auto_split.map(|a| a.bytes_per_s),
            auto_split_window_ms: self.auto_split.map(|a| a.window_ms),
            auto_split_cooldown_ms: self.auto_split.map(|a| a.cooldown_ms),
        }
    }

    /// Checks every option's range.
    pub fn validate(&self) -> Result<(), BrokerError> {
        let bad = |m: String| Err(BrokerError::InvalidConfig(m));
        if self.partitions == 0 || self.partitions > PARTITIONS_MAX {
            return bad(format!(
                "partitions must be 1..={PARTITIONS_MAX}, not {}",
                self.partitions
            ));
        }
        if self.retention_ms == Some(0) {
            return bad("retention must be positive".into());
        }
        if self.retention_bytes == Some(0) {
            return bad("retention bytes must be positive".into());
        }
        if self.durability.interval_ms() == Some(0) {
            return bad("durability interval must be positive".into());
        }
        if self.max_record_bytes == 0 {
            return bad("max record bytes must be positive".into());
        }
        if let Some(stored) = &self.ranges {
            let map = stored
                .to_map()
                .map_err(|e| BrokerError::InvalidConfig(e.to_string()))?;
            if map.ranges().len() != self.partitions as usize {
                return bad(format!(
                    "an elastic topic of {} partitions has {} ranges",
                    self.partitions,
                    map.ranges().len()
                ));
            }
        }
        if let Some(a) = &self.auto_split {
            if self.ranges.is_none() {
                return bad("auto_split needs an elastic topic (its ranges split)".into());
            }
            if a.bytes_per_s == 0 {
                return bad("auto_split must be positive (bytes per second)".into());
            }
            if !AUTO_SPLIT_WINDOW_MS.contains(&a.window_ms) {
                return bad(format!(
                    "auto_split_window_ms must be {}..={}, not {}",
                    AUTO_SPLIT_WINDOW_MS.start(),
                    AUTO_SPLIT_WINDOW_MS.end(),
                    a.window_ms
                ));
            }
            if a.cooldown_ms < a.window_ms.saturating_mul(2)
                || a.cooldown_ms > AUTO_SPLIT_COOLDOWN_MS_MAX
            {
                return bad(format!(
                    "auto_split_cooldown_ms must be at least two windows ({}) and at most \
                     {AUTO_SPLIT_COOLDOWN_MS_MAX}, not {}",
                    a.window_ms.saturating_mul(2),
                    a.cooldown_ms
                ));
            }
        }
        self.log_config(16 << 20)
            .validate()
            .map_err(|e| BrokerError::InvalidConfig(e.to_string()))
    }

    /// The log engine's options for one partition of this topic.
    pub fn log_config(&self, batch_bytes_max: u32) -> LogConfig {
        LogConfig {
            segment_bytes_max: self.segment_bytes,
            durability: self.durability,
            retention_age: self.retention_ms.map(Duration::from_millis),
            retention_bytes: self.retention_bytes,
            batch_bytes_max,
            record_bytes_max: self.max_record_bytes,
            ..LogConfig::default()
        }
    }

    /// Where `requested` (with only the fields a request set) disagrees with `self`.
    pub fn conflicts(&self, requested: &pb::TopicOptions) -> Vec<String> {
        let mut out = Vec::new();
        if requested.elastic != self.ranges.is_some() {
            out.push(if requested.elastic {
                "it is not elastic".to_owned()
            } else {
                "it is elastic".to_owned()
            });
        } else if self.ranges.is_some() {
            // An elastic topic's partitions grow by splitting: the count asked for at
            // creation is the count of its initial ranges.
            let initial = self.range_map().map_or(0, |m| {
                m.ranges().iter().filter(|r| r.parents.is_empty()).count()
            });
            if requested.partitions != 0 && requested.partitions as usize != initial {
                out.push(format!(
                    "it started with {initial} ranges, not {}",
                    requested.partitions
                ));
            }
        }
        if self.ranges.is_none()
            && requested.partitions != 0
            && requested.partitions != self.partitions
        {
            out.push(format!(
                "it has {} partitions, not {}",
                self.partitions, requested.partitions
            ));
        }
        let differs = |name: &str, want: Option<u64>, have: Option<u64>, out: &mut Vec<String>| {
            if let Some(want) = want
                && Some(want) != have
            {
                let have = have.map_or_else(|| "none".to_owned(), |h| h.to_string());
                out.push(format!("its {name} is {have}, not {want}"));
            }
        };
        differs(
            "retention_ms",
            requested.retention_ms,
            self.retention_ms,
            &mut out,
        );
        differs(
            "retention_bytes",
            requested.retention_bytes,
            self.retention_bytes,
            &mut out,
        );
        differs(
            "segment_bytes",
            requested.segment_bytes,
            Some(self.segment_bytes),
            &mut out,
        );
        differs(
            "max_record_bytes",
            requested.max_record_bytes.map(u64::from),
            Some(u64::from(self.max_record_bytes)),
            &mut out,
        );
        let auto = self.auto_split;
        differs(
            "auto_split",
            requested.auto_split,
            auto.map(|a| a.bytes_per_s),
            &mut out,
        );
        differs(
            "auto_split_window_ms",
            requested.auto_split_window_ms,
            auto.map(|a| a.window_ms),
            &mut out,
        );
        differs(
            "auto_split_cooldown_ms",
            requested.auto_split_cooldown_ms,
            auto.map(|a| a.cooldown_ms),
            &mut out,
        );
        if requested.durability != pb::Durability::Unspecified as i32
            && requested.durability != self.to_proto().durability
            || requested.durability_interval_ms.is_some()
                && requested.durability_interval_ms != self.to_proto().durability_interval_ms
        {
            out.push(format!("its durability is {}", self.durability));
        }
        out
    }
}

/// The catalog as stored in `catalog.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct CatalogFile {
    pub(crate) version: u32,
    pub(crate) streams: BTreeMap<String, StreamFile>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct StreamFile {
    pub(crate) created_us: i64,
    pub(crate) topics: BTreeMap<String, TopicFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TopicFile {
    pub(crate) created_us: i64,
    pub(crate) config: TopicConfig,
}

/// The catalog's version: 2 once it holds an elastic topic (so a build that does not
/// know elastic topics refuses it rather than routing their keys as a plain topic's);
/// 1 otherwise, as every catalog before them.
pub(crate) const CATALOG_VERSION: u32 = 1;
pub(crate) const CATALOG_VERSION_RANGES: u32 = 2;

pub(crate) fn catalog_path(data_dir: &Path) -> PathBuf {
    data_dir.join("catalog.json")
}

/// Wraps an I/O error of the broker's own files (catalog, directories, offsets).
pub(crate) fn catalog_err(
    op: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> BrokerError + use<> {
    let path = path.to_path_buf();
    move |source| BrokerError::Catalog { op, path, source }
}

/// Largest `catalog.json` read: a bound on what a damaged file can make us allocate.
const CATALOG_BYTES_MAX: u64 = 256 << 20;

pub(crate) fn load(io: &dyn Io, data_dir: &Path) -> Result<CatalogFile, BrokerError> {
    let path = catalog_path(data_dir);
    if !io.exists(&path) {
        return Ok(CatalogFile {
            version: CATALOG_VERSION,
            ..CatalogFile::default()
        });
    }
    let text = read_file(io, &path, CATALOG_BYTES_MAX).map_err(catalog_err("read", &path))?;
    let catalog: CatalogFile = serde_json::from_slice(&text).map_err(|e| {
        catalog_err("parse", &path)(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    })?;
    if catalog.version != CATALOG_VERSION && catalog.version != CATALOG_VERSION_RANGES {
        return Err(catalog_err("read", &path)(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("catalog version {} is not supported", catalog.version),
        )));
    }
    for (stream, s) in &catalog.streams {
        validate_name("stream", stream).map_err(|e| invalid_catalog(&path, &e))?;
        for (topic, t) in &s.topics {
            validate_name("topic", topic).map_err(|e| invalid_catalog(&path, &e))?;
            t.config
                .validate()
                .map_err(|e| invalid_catalog(&path, &e))?;
        }
    }
    Ok(catalog)
}

fn invalid_catalog(path: &Path, e: &BrokerError) -> BrokerError {
    catalog_err("parse", path)(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        e.to_string(),
    ))
}

/// Reads a whole small file through the disk seam, refusing one over `max` bytes.
pub(crate) fn read_file(io: &dyn Io, path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = io.open(path, false)?;
    let len = file.size()?;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{len} bytes, more than the {max} bytes allowed"),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// Writes a small file atomically and durably: a temporary file, synced, renamed over
/// the old one, the directory synced.
pub(crate) fn replace_file(
    io: &dyn Io,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<(), BrokerError> {
    replace(io, dir, name, bytes, false)
}

/// [`replace_file`] for a file that holds credentials: the temporary file is made
/// readable by its owner only (mode 0600) before a byte is written to it.
pub(crate) fn replace_private_file(
    io: &dyn Io,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<(), BrokerError> {
    replace(io, dir, name, bytes, true)
}

fn replace(
    io: &dyn Io,
    dir: &Path,
    name: &str,
    bytes: &[u8],
    private: bool,
) -> Result<(), BrokerError> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let file = io.open(&tmp, true).map_err(catalog_err("create", &tmp))?;
    if private {
        io.restrict_to_owner(&tmp)
            .map_err(catalog_err("restrict the mode of", &tmp))?;
    }
    file.set_len(0).map_err(catalog_err("truncate", &tmp))?;
    file.write_all_at(bytes, 0)
        .map_err(catalog_err("write", &tmp))?;
    file.sync_data().map_err(catalog_err("sync", &tmp))?;
    drop(file);
    io.rename(&tmp, &path)
        .map_err(catalog_err("rename", &path))?;
    io.sync_dir(dir).map_err(catalog_err("sync directory", dir))
}

pub(crate) fn save(io: &dyn Io, data_dir: &Path, catalog: &CatalogFile) -> Result<(), BrokerError> {
    let text = serde_json::to_vec_pretty(catalog).expect("the catalog serializes");
    replace_file(io, data_dir, "catalog.json", &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catalogs written before the durability types were unified still load, and are
    /// written the same way.
    #[test]
    fn durability_keeps_its_catalog_form() {
        for (d, json) in [
            (Durability::Always, r#""always""#),
            (Durability::Never, r#""never""#),
            (
                Durability::Interval(Duration::from_millis(250)),
                r#"{"interval":{"ms":250}}"#,
            ),
        ] {
            let config = TopicConfig::with_partitions(3, d);
            let text = serde_json::to_string(&config).unwrap();
            assert!(text.contains(&format!(r#""durability":{json}"#)), "{text}");
            let back: TopicConfig = serde_json::from_str(&text).unwrap();
            assert_eq!(back, config);
        }
    }
}
