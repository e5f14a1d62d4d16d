//! What must hold after a restart: reading back everything a recovered log serves,
//! and comparing it with what was acknowledged and what was durable.

use std::collections::HashMap;
use std::path::Path;

use rill_format::BatchView;
use rill_storage::sim::SimIo;
use rill_storage::{DamagedRange, Durability, PartitionLog, StorageError};

use super::DIR;
use super::workload::{Run, parse_value};

/// `Ok` if `cond` holds, else the failure `what` describes.
pub(crate) fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what()) }
}

/// A batch found in a log or in durable bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) base: u64,
    pub(crate) tag: u64,
    pub(crate) count: u64,
}

/// Everything a recovered log serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Survey {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) batches: Vec<Found>,
    /// Damaged ranges met while reading: (from, to).
    pub(crate) lost: Vec<(u64, Option<u64>)>,
}

/// The restarts a crash allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    TornPowerLoss,
    PowerLoss,
    ProcessCrash,
}

impl Run {
    /// Names a batch read back and checks it is exactly one the workload wrote.
    pub(crate) fn identify(&self, batch: &BatchView<'_>) -> Result<Found, String> {
        let base = batch.base_offset();
        let mut tag = None;
        let mut count = 0u64;
        for (i, r) in batch.records().enumerate() {
            let (t, j) =
                parse_value(r.value).ok_or_else(|| format!("batch at {base}: foreign record"))?;
            ensure(*tag.get_or_insert(t) == t && j == i, || {
                format!("batch at {base} mixes records (T{t}:{j} at position {i})")
            })?;
            let written = self
                .attempted
                .get(&t)
                .ok_or_else(|| format!("batch at {base}: T{t} was never written"))?;
            ensure(
                written.values.get(i).map(Vec::as_slice) == Some(r.value),
                || format!("batch at {base}: record T{t}:{i} differs from what was written"),
            )?;
            ensure(r.offset == base + i as u64, || {
                format!("batch at {base}: record {i} has offset {}", r.offset)
            })?;
            count += 1;
        }
        let tag = tag.ok_or_else(|| format!("batch at {base} is empty"))?;
        ensure(count == self.attempted[&tag].values.len() as u64, || {
            format!("batch at {base}: T{tag} has {count} records")
        })?;
        Ok(Found { base, tag, count })
    }

    /// Reads all a recovered log serves, checking offsets are dense and each batch is
    /// one the workload wrote, once.
    pub(crate) fn survey(&self, log: &PartitionLog) -> Result<Survey, String> {
        let (start, end) = (log.log_start(), log.next_offset());
        let mut survey = Survey {
            start,
            end,
            batches: Vec::new(),
            lost: Vec::new(),
        };
        let mut seen: HashMap<u64, u64> = HashMap::new();
        let mut at = start;
        while at < end {
            match log.read(at, 16 * 1024) {
                Ok(read) => {
                    ensure(!read.bytes.is_empty(), || {
                        format!(
                            "read at {at} returned nothing before the end {end} (damage {:?})",
                            log.damage()
                        )
                    })?;
                    for batch in read.batches() {
                        let batch = batch.map_err(|e| format!("read at {at}: {e}"))?;
                        let found = self.identify(&batch)?;
                        // The first batch may begin below a purged start (docs/FORMAT.md
                        // §4, "Purge"): its records below the start are not counted.
                        let straddles =
                            at == start && found.base < start && found.base + found.count > start;
                        ensure(found.base == at || straddles, || {
                            format!(
                                "offsets not dense: batch T{} at {} where {at} was next",
                                found.tag, found.base
                            )
                        })?;
                        if let Some(other) = seen.insert(found.tag, found.base) {
                            return Err(format!(
                                "T{} appears twice, at {other} and {}",
                                found.tag, found.base
                            ));
                        }
                        survey.batches.push(found);
                        at = found.base + found.count;
                    }
                }
                Err(StorageError::DataLoss { from, to, .. }) => {
                    survey.lost.push((from, to));
                    match to {
                        Some(to) if to > at => at = to,
                        _ => break,
                    }
                }
                Err(e) => return Err(format!("read at {at}: {e}")),
            }
        }
        // Reads through the sparse index land on the right batch too.
        for f in &survey.batches {
            for offset in [f.base.max(start), f.base + f.count - 1] {
                let read = log
                    .read(offset, 1)
                    .map_err(|e| format!("read at {offset}: {e}"))?;
                let batch = read
                    .batches()
                    .next()
                    .ok_or_else(|| format!("read at {offset} returned nothing"))?
                    .map_err(|e| format!("read at {offset}: {e}"))?;
                ensure(batch.base_offset() == f.base, || {
                    format!(
                        "read at {offset} returned the batch at {}, not T{} at {}",
                        batch.base_offset(),
                        f.tag,
                        f.base
                    )
                })?;
            }
        }
        Ok(survey)
    }

    /// Recovers one restart image and checks it (see the module docs).
    pub(crate) fn check(
        &mut self,
        how: Restart,
        image: &SimIo,
        durable: &[Found],
        retention_start: u64,
    ) -> Result<Survey, String> {
        let log = self
            .open(image)
            .map_err(|e| format!("recovery failed: {e}"))?;
        let survey = self.survey(&log)?;
        ensure(survey.start >= self.purged, || {
            format!(
                "an acknowledged purge below {} came back: the log starts at {}",
                self.purged, survey.start
            )
        })?;
        let damage = log.damage();
        let always = self.config.durability == Durability::Always;
        ensure(!always || damage.is_empty(), || {
            format!("a crash under `always` left damage: {damage:?}")
        })?;
        let at: HashMap<u64, Found> = survey.batches.iter().map(|f| (f.tag, *f)).collect();
        if always || how == Restart::ProcessCrash {
            for (&tag, &base) in &self.acked {
                if base < retention_start {
                    continue;
                }
                match at.get(&tag) {
                    Some(f) => ensure(f.base == base, || {
                        format!("acknowledged T{tag} at {base} came back at {}", f.base)
                    })?,
                    None => {
                        return Err(format!(
                            "acknowledged T{tag} at {base} is lost (log {}..{}, lost ranges {:?})",
                            survey.start, survey.end, survey.lost
                        ));
                    }
                }
            }
        }
        for d in durable.iter().filter(|d| d.base >= retention_start) {
            ensure(at.get(&d.tag) == Some(d), || {
                format!(
                    "durable T{} at {} is lost by recovery (found {:?}; log {}..{}, damage {damage:?})",
                    d.tag,
                    d.base,
                    at.get(&d.tag),
                    survey.start,
                    survey.end
                )
            })?;
        }

        // Recovery is settled: another one, before anything changes, finds the same log
        // and the same damage (damage it forgot would no longer fail the partition).
        drop(log);
        let log = self
            .open(image)
            .map_err(|e| format!("second recovery failed: {e}"))?;
        let again = self.survey(&log)?;
        let ranges = |d: &[DamagedRange]| -> Vec<(u64, Option<u64>, bool)> {
            d.iter()
                .map(|r| (r.from_offset, r.to_offset, r.accepted))
                .collect()
        };
        ensure(
            again == survey && ranges(&log.damage()) == ranges(&damage),
            || {
                format!(
                    "the second recovery disagrees: {again:?} with damage {:?}, after {survey:?} with damage {damage:?}",
                    log.damage()
                )
            },
        )?;

        // The recovered log takes appends at its next offset (once damage is accepted),
        // and the next recovery agrees.
        if log.failure().is_some() {
            log.accept_damage(self.offset_high)
                .map_err(|e| format!("accept_damage: {e}"))?;
        }
        let next = log.next_offset();
        let marker = self.new_batch();
        let appended = log
            .append(&marker.bytes)
            .map_err(|e| format!("append after recovery: {e}"))?;
        ensure(appended.base_offset == next, || {
            format!(
                "append after recovery went to {}, not {next}",
                appended.base_offset
            )
        })?;
        log.close()
            .map_err(|e| format!("close after recovery: {e}"))?;
        drop(log);
        let last = self
            .open(image)
            .map_err(|e| format!("recovery after the append failed: {e}"))?;
        let after = self.survey(&last)?;
        let mut expected = survey.clone();
        expected.batches.push(Found {
            base: next,
            tag: marker.tag,
            count: marker.values.len() as u64,
        });
        expected.end = appended.last_offset + 1;
        ensure(
            after.batches == expected.batches && after.end == expected.end,
            || format!("the recovery after an append disagrees: {after:?}, expected {expected:?}"),
        )?;
        Ok(survey)
    }
}

/// The batches in the durable bytes of every durable segment of the log: each
/// segment's durable bytes as a chain of valid batches from its start.
pub(crate) fn durable_batches(disk: &SimIo) -> Result<Vec<Found>, String> {
    let mut out = Vec::new();
    for path in disk.durable_entries(Path::new(DIR)).unwrap_or_default() {
        let Some(base) = segment_base(&path) else {
            continue;
        };
        let bytes = disk.durable_bytes(&path).unwrap_or_default();
        let mut pos = 0;
        let mut expected = base;
        while let Ok(batch) = BatchView::parse(&bytes[pos..]) {
            if batch.base_offset() != expected {
                break;
            }
            let first = batch.records().next().expect("a batch has a record");
            let (tag, _) = parse_value(first.value)
                .ok_or_else(|| format!("{}: a foreign record", path.display()))?;
            out.push(Found {
                base: expected,
                tag,
                count: u64::from(batch.record_count()),
            });
            expected = batch.next_offset();
            pos += batch.as_bytes().len();
        }
    }
    Ok(out)
}

fn segment_base(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".log")?;
    (stem.len() == 20).then(|| stem.parse().ok()).flatten()
}
