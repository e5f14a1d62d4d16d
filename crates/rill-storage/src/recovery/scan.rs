//! The validation of one segment during recovery: batch by batch, cutting a torn tail
//! where the rules allow and quarantining every other damage; and the bookkeeping of
//! damaged ranges (accepted ones found again, contained ones dropped).

use std::path::Path;

use super::{Cut, OpenEnded, Tail, first_timestamp};
use crate::StorageError;
use crate::config::LogConfig;
use crate::damage::{Accepted, DamagedRange, search_after};
use crate::error::io_err;
use crate::io::IoFile;
use crate::recovery_point::RecoveryPoint;
use crate::segment::{DamagedBytes, IndexCadence, ScanStop, Scanner, Segment};

/// A full validation of one segment, recording the damage it quarantines.
pub(super) struct Scan<'a> {
    pub(super) segment: &'a Segment,
    pub(super) file: &'a dyn IoFile,
    pub(super) config: &'a LogConfig,
    pub(super) len: u64,
    pub(super) damage: &'a mut Vec<DamagedRange>,
    /// Set if quarantined damage runs to the end of the segment.
    pub(super) open_ended: Option<OpenEnded>,
}

impl Scan<'_> {
    /// Validates a segment at or after the recovery point: from the point (when it names
    /// this segment and checks out) or from the start.
    pub(super) fn validate(
        &mut self,
        rp: Option<RecoveryPoint>,
        max_ts_before: Option<i64>,
        cut: Cut,
    ) -> Result<Tail, StorageError> {
        let base = self.segment.base_offset;
        let rp = rp.filter(|rp| rp.position <= self.len && rp.next_offset >= base);
        let mut cut = cut;
        if let Some(rp) = rp {
            if point_is_sound(self.segment, self.file, &rp)?
                && let Some(found) =
                    self.run(rp.position, rp.next_offset, rp.max_timestamp_us, cut)?
            {
                return Ok(found);
            }
            // A point with a valid CRC that does not describe the file (a bug or
            // tampering wrote it) proves nothing: validate all of it, and cut only what a
            // process crash could have left.
            tracing::warn!(path = %self.segment.path.display(), "the recovery point does not describe the segment; validating all of it");
            if cut != Cut::Never {
                cut = Cut::TornOnly;
            }
        }
        Ok(self
            .run(0, base, max_ts_before, cut)?
            .expect("a scan from the start always fits"))
    }

    /// Validates `[start, len)`, expecting `expected` as the first offset. At damage it
    /// cuts (where `cut` allows) or quarantines and goes on after the damage. `None` if
    /// a valid batch at `start > 0` has another offset (the recovery point does not
    /// describe this file).
    pub(super) fn run(
        &mut self,
        start: u64,
        expected: u64,
        max_ts_before: Option<i64>,
        cut: Cut,
    ) -> Result<Option<Tail>, StorageError> {
        let segment = self.segment;
        let base = segment.base_offset;
        {
            let mut index = segment.index_mut();
            let keep = index
                .entries()
                .iter()
                .take_while(|e| u64::from(e.position) < start)
                .count();
            if keep < index.entries().len() {
                index.truncate(keep)?;
            }
        }
        if start > 0 {
            super::complete_index(segment, self.file, self.config, start);
        }
        let mut cadence =
            IndexCadence::new(self.config.index_interval_bytes, segment.index().last());
        let mut position = start;
        let mut next_offset = expected;
        let mut max_ts = max_ts_before;
        let mut first = true;
        let mut end = self.len;
        'scan: loop {
            let mut scanner =
                Scanner::new(self.file, &segment.path, position, self.len).validating(next_offset);
            loop {
                match scanner.next_batch()? {
                    Ok(Some(found)) => {
                        if let Some(entry) = cadence.entry(base, &found) {
                            segment.index_mut().push(entry)?;
                        }
                        next_offset = found.header.next_offset().expect("validated batch");
                        max_ts = Some(max_ts.map_or(found.header.max_timestamp_us, |m| {
                            m.max(found.header.max_timestamp_us)
                        }));
                    }
                    Ok(None) => break 'scan,
                    Err(ScanStop::OffsetMismatch { .. }) if first && start > 0 => return Ok(None),
                    Err(stop) => {
                        let at = scanner.position();
                        if cut.allows(at, &stop) {
                            tracing::warn!(
                                path = %segment.path.display(),
                                position = at,
                                dropped_bytes = self.len - at,
                                reason = %stop,
                                "truncating the torn, unsynced tail of the last segment"
                            );
                            self.file
                                .set_len(at)
                                .map_err(io_err("truncate segment", &segment.path))?;
                            end = at;
                            break 'scan;
                        }
                        match self.quarantine(at, next_offset, &stop)? {
                            Some(resume) => {
                                position = resume.position;
                                next_offset = resume.base_offset;
                                first = false;
                                continue 'scan;
                            }
                            None => break 'scan,
                        }
                    }
                }
                first = false;
            }
        }
        segment.set_visible_len(end);
        let first_ts = first_timestamp(segment, self.file, end)?;
        Ok(Some(Tail {
            next_offset,
            max_ts,
            first_ts,
        }))
    }

    /// Records the damage at `at` and finds where valid data resumes; `None` if it does
    /// not in this segment (the damage then runs to its end).
    fn quarantine(
        &mut self,
        at: u64,
        expected: u64,
        stop: &ScanStop,
    ) -> Result<Option<crate::damage::Resync>, StorageError> {
        let segment = self.segment;
        let after = search_after(self.file, &segment.path, at, self.len, expected)?;
        let (end_position, to_offset) = match after.resync {
            Some(r) => (r.position, Some(r.base_offset)),
            None => (self.len, None),
        };
        tracing::error!(
            path = %segment.path.display(),
            position = at,
            end_position,
            from = expected,
            to = ?to_offset,
            reason = %stop,
            "damaged data: quarantined, not cut"
        );
        segment.add_damage(DamagedBytes {
            start: at,
            end: end_position,
            from_offset: expected,
            to_offset,
        });
        self.damage.push(DamagedRange {
            from_offset: expected,
            to_offset,
            segment: segment.path.clone(),
            segment_base: segment.base_offset,
            position: at,
            end_position,
            reason: stop.to_string(),
            accepted: false,
        });
        if after.resync.is_none() {
            self.open_ended = Some(OpenEnded {
                range: self.damage.len() - 1,
                hint: after.header_next_offset,
            });
        }
        Ok(after.resync)
    }
}

/// Drops damaged ranges another one contains, so one damage is reported (and accepted)
/// once: a gap whose offsets are a damaged range's (after damage at the end of a
/// segment is accepted, the next segment starts where appends resumed, and the offsets
/// in between are that damage's, not a second loss), and a range inside another's
/// bytes and offsets (a later open, checking from a recovery point inside accepted
/// damage, finds only its tail).
pub(super) fn drop_contained(damage: &mut Vec<DamagedRange>) {
    let contains = |outer: &DamagedRange, inner: &DamagedRange| {
        let offsets = outer.from_offset <= inner.from_offset
            && match (outer.to_offset, inner.to_offset) {
                (None, _) => true,
                (Some(a), Some(b)) => a >= b,
                (Some(_), None) => false,
            };
        if !offsets || outer.position == outer.end_position {
            return false;
        }
        if inner.position == inner.end_position {
            return true;
        }
        outer.segment_base == inner.segment_base
            && outer.position <= inner.position
            && inner.end_position <= outer.end_position
            && (outer.position, outer.end_position) != (inner.position, inner.end_position)
    };
    let keep: Vec<bool> = damage
        .iter()
        .map(|inner| {
            !damage
                .iter()
                .any(|outer| !std::ptr::eq(outer, inner) && contains(outer, inner))
        })
        .collect();
    let mut keep = keep.into_iter();
    damage.retain(|_| keep.next().unwrap_or(true));
}

/// Damage an operator accepted that this open did not come across (a durable segment
/// is only checked from its last index entry): registered again from the accepted
/// entry, if the bytes there are still not a valid batch.
pub(super) fn apply_accepted(
    segment: &Segment,
    file: &dyn IoFile,
    len: u64,
    accepted: &[Accepted],
    damage: &mut Vec<DamagedRange>,
    found_from: usize,
) -> Result<(), StorageError> {
    for entry in accepted.iter().filter(|a| {
        // An entry for offsets before the segment's base is a gap (missing segments, or
        // a lost tail rolled past) filed under the segment after it: it names no bytes
        // of this segment, whether the gap is still there or retention took it.
        a.key.segment_base == segment.base_offset
            && a.key.from_offset >= segment.base_offset
            && a.key.position < len
    }) {
        if damage[found_from..].iter().any(|d| entry.matches(d)) {
            continue;
        }
        if batch_is_valid_at(
            file,
            &segment.path,
            entry.key.position,
            len,
            entry.key.from_offset,
        )? {
            tracing::info!(path = %segment.path.display(), position = entry.key.position, "accepted damage is no longer there");
            continue;
        }
        let after = search_after(
            file,
            &segment.path,
            entry.key.position,
            len,
            entry.key.from_offset,
        )?;
        let (end_position, to_offset) = match after.resync {
            Some(r) => (r.position, Some(r.base_offset)),
            None => (len, entry.to_offset),
        };
        segment.add_damage(DamagedBytes {
            start: entry.key.position,
            end: end_position,
            from_offset: entry.key.from_offset,
            to_offset,
        });
        damage.push(DamagedRange {
            from_offset: entry.key.from_offset,
            to_offset,
            segment: segment.path.clone(),
            segment_base: segment.base_offset,
            position: entry.key.position,
            end_position,
            reason: "damage accepted earlier".to_owned(),
            accepted: true,
        });
    }
    Ok(())
}

fn batch_is_valid_at(
    file: &dyn IoFile,
    path: &Path,
    position: u64,
    len: u64,
    base_offset: u64,
) -> Result<bool, StorageError> {
    let mut scanner = Scanner::new(file, path, position, len).validating(base_offset);
    Ok(matches!(scanner.next_batch()?, Ok(Some(_))))
}

/// Whether the recovery point names a batch boundary of the segment and the offset
/// there: the headers from the last index entry below it (which must point at a batch
/// with the offset it claims) chain exactly to its position and to its next offset.
/// Entries below the point are kept without a scan, so a damaged index is caught here
/// too (and the whole segment rescanned) rather than by reads.
fn point_is_sound(
    segment: &Segment,
    file: &dyn IoFile,
    rp: &RecoveryPoint,
) -> Result<bool, StorageError> {
    let entry = segment
        .index()
        .entries()
        .iter()
        .take_while(|e| u64::from(e.position) < rp.position)
        .last()
        .copied();
    let (start, mut next) = entry.map_or((0, segment.base_offset), |e| {
        (
            u64::from(e.position),
            segment.base_offset + u64::from(e.rel_offset),
        )
    });
    let mut scanner = Scanner::new(file, &segment.path, start, rp.position)
        .with_chunk(rill_format::BATCH_HEADER_LEN)
        .chaining(next);
    loop {
        match scanner.next_batch()? {
            Ok(Some(found)) => match found.header.next_offset() {
                Some(n) => next = n,
                None => return Ok(false),
            },
            Ok(None) => return Ok(scanner.position() == rp.position && next == rp.next_offset),
            Err(_) => return Ok(false),
        }
    }
}
