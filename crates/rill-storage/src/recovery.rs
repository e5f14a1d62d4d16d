//! Opening a log: find the segments, check the sealed ones, repair the unsynced tail of
//! the last one, quarantine every other damage (`docs/FORMAT.md` §4, "Recovery on
//! open" and "Damage").
//!
//! The rule that keeps durable data safe: recovery truncates only the last segment, and
//! only from a point it can prove lies after the last sync (the recovery point), or an
//! incomplete final batch when there is no recovery point. It never deletes a segment.

use std::path::Path;
use std::sync::Arc;

use crate::StorageError;
use crate::config::LogConfig;
use crate::damage::{Accepted, DamagedRange, read_accepted, search_after};
use crate::env::LogEnv;
use crate::error::io_err;
use crate::files::SegmentFile;
use crate::index::SegmentIndex;
use crate::io::{Io, IoFile};
use crate::log::{Writer, create_segment};
use crate::recovery_point::RecoveryPoint;
use crate::segment::{
    DamagedBytes, Found, IndexCadence, ScanStop, Scanner, Segment, entry_for, log_path,
    parse_log_name,
};

pub(crate) struct Recovered {
    pub(crate) segments: Vec<Arc<Segment>>,
    pub(crate) writer: Writer,
    pub(crate) damage: Vec<DamagedRange>,
}

/// What a scan of a segment found.
struct Tail {
    next_offset: u64,
    max_ts: Option<i64>,
    first_ts: Option<i64>,
}

/// Damage that runs to the end of a segment: the offsets it held end where the next
/// segment starts (or, in the last segment, nobody knows yet).
#[derive(Debug, Clone, Copy)]
struct OpenEnded {
    /// Index of the range in the damage list.
    range: usize,
    /// A lower bound for offsets the damaged records may have used.
    hint: Option<u64>,
}

/// A recovered segment, its open file and its first timestamp.
type Opened = (Arc<Segment>, Arc<dyn IoFile>, Option<i64>);

/// Where the last segment may be cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Nowhere: the segment is sealed, or lies below the recovery point.
    Never,
    /// At any damage: the recovery point names an earlier segment, so all of this one
    /// was written after the last sync the point records.
    Anywhere,
    /// At damage at or after this position (the recovery point's).
    From(u64),
    /// Only at an incomplete final batch (there is no recovery point to prove more).
    TornOnly,
}

impl Cut {
    fn allows(self, position: u64, stop: &ScanStop) -> bool {
        match self {
            Self::Never => false,
            Self::Anywhere => true,
            Self::From(rp) => position >= rp,
            Self::TornOnly => matches!(stop, ScanStop::Torn),
        }
    }
}

pub(crate) fn recover(
    dir: &Path,
    config: &LogConfig,
    env: &LogEnv,
) -> Result<Recovered, StorageError> {
    let io = env.io.as_ref();
    create_log_dir(io, dir)?;
    let entries = io.read_dir(dir).map_err(io_err("list directory", dir))?;
    let mut bases: Vec<u64> = entries.iter().filter_map(|p| parse_log_name(p)).collect();
    bases.sort_unstable();
    remove_orphan_indexes(io, &entries, &bases)?;

    if bases.is_empty() {
        let (segment, file) = create_segment(env, dir, config.initial_offset)?;
        let segment = Arc::new(segment);
        // A new log gets its recovery point on disk at once: a log with data then always
        // has one, which is what lets a later recovery cut a torn tail.
        RecoveryPoint {
            segment_base: config.initial_offset,
            position: 0,
            next_offset: config.initial_offset,
            max_timestamp_us: None,
        }
        .write_durable(io, dir)
        .map_err(io_err("write recovery point", dir))?;
        let writer = Writer::new(
            config,
            Arc::clone(&segment),
            file,
            WriterState {
                written_len: 0,
                next_offset: config.initial_offset,
                last_max_ts: None,
                segment_first_ts: None,
                tail_damage: None,
            },
        );
        return Ok(Recovered {
            segments: vec![segment],
            writer,
            damage: Vec::new(),
        });
    }

    let rp = RecoveryPoint::read(io, dir);
    let accepted = read_accepted(io, dir);
    let last = bases.len() - 1;
    // Segments before `first_unsafe` are durable per the recovery point.
    let (first_unsafe, last_cut, rp_after_last) = match rp {
        None => (0, Cut::TornOnly, None),
        Some(rp) => match bases.binary_search(&rp.segment_base) {
            Ok(i) if i == last => (i, Cut::From(rp.position), None),
            Ok(i) => (i, Cut::Anywhere, None),
            Err(i) if i == bases.len() => (bases.len(), Cut::Never, Some(rp)),
            Err(i) => (i, Cut::Anywhere, None),
        },
    };

    let mut segments: Vec<Opened> = Vec::with_capacity(bases.len());
    let mut damage: Vec<DamagedRange> = Vec::new();
    let mut open_ended: Option<OpenEnded> = None;
    let mut expected: Option<u64> = None;
    let mut last_max_ts: Option<i64> = None;
    for (i, &base) in bases.iter().enumerate() {
        let path = log_path(dir, base);
        if let Some(ended) = open_ended.take() {
            // Damage ran to the end of the previous segment: its offsets end here.
            damage[ended.range].to_offset = Some(base);
            segments[i - 1].0.close_damage(base);
            expected = Some(base);
        }
        // Damage recorded at this segment from here on, the gap before it included:
        // an accepted gap names this segment at position 0, and must not be taken for
        // damage in its bytes by `apply_accepted`.
        let found_from = damage.len();
        if let Some(expected) = expected {
            if base < expected {
                return Err(StorageError::Corrupt {
                    path,
                    position: 0,
                    reason: format!(
                        "segment starts at offset {base}, inside the previous segment (which ends at {expected})"
                    ),
                });
            }
            if base > expected {
                tracing::error!(path = %path.display(), from = expected, to = base, "segment files are missing: quarantining the gap");
                damage.push(DamagedRange {
                    from_offset: expected,
                    to_offset: Some(base),
                    segment: path.clone(),
                    segment_base: base,
                    position: 0,
                    end_position: 0,
                    reason: format!("the segment files for offsets {expected}..{base} are missing"),
                    accepted: false,
                });
            }
        }
        let file = io
            .open(&path, false)
            .map_err(io_err("open segment", &path))?;
        let len = file.size().map_err(io_err("stat segment", &path))?;
        let (index, index_ok) = SegmentIndex::open(io, dir, base, len)?;
        let segment = Segment::new(
            base,
            path.clone(),
            SegmentFile::pinned(
                path.clone(),
                Arc::clone(&file),
                Arc::clone(&env.io),
                Arc::clone(&env.files),
            ),
            index,
        );
        let mut scan = Scan {
            segment: &segment,
            file: file.as_ref(),
            config,
            len,
            damage: &mut damage,
            open_ended: None,
        };
        let tail = if i < first_unsafe {
            match open_sealed(&segment, file.as_ref(), config, len, index_ok)? {
                Some(tail) => tail,
                None => {
                    tracing::error!(path = %segment.path.display(), "a durable segment is damaged: validating all of it");
                    scan.run(0, base, last_max_ts, Cut::Never)?
                        .expect("a scan from the start always fits")
                }
            }
        } else {
            let cut = if i == last { last_cut } else { Cut::Never };
            let from_rp = rp.filter(|rp| rp.segment_base == base);
            scan.validate(from_rp, last_max_ts, cut)?
        };
        let mut ended = scan.open_ended;
        if let Some(rp) = rp.filter(|rp| rp.segment_base == base && i == last)
            && rp.position > len
            && tail.next_offset < rp.next_offset
            && ended.is_none()
        {
            // Synced data is gone: the file is shorter than the point says is durable.
            tracing::error!(path = %path.display(), len, durable = rp.position, "the last segment lost synced data: quarantining its offsets");
            damage.push(DamagedRange {
                from_offset: tail.next_offset,
                to_offset: None,
                segment: path.clone(),
                segment_base: base,
                position: len,
                end_position: len,
                reason: format!(
                    "the segment is {len} bytes, shorter than the {} bytes the recovery point records as synced",
                    rp.position
                ),
                accepted: false,
            });
            ended = Some(OpenEnded {
                range: damage.len() - 1,
                hint: Some(rp.next_offset),
            });
        }
        apply_accepted(
            &segment,
            file.as_ref(),
            len,
            &accepted,
            &mut damage,
            found_from,
        )?;
        if let Some(ts) = tail.max_ts {
            segment.observe_timestamp(ts);
            last_max_ts = Some(last_max_ts.map_or(ts, |m| m.max(ts)));
        }
        segment.set_next_offset(tail.next_offset);
        expected = Some(tail.next_offset);
        open_ended = ended;
        segments.push((Arc::new(segment), file, tail.first_ts));
    }

    // Segments lost at the end: the recovery point names one after the last present.
    let mut tail_damage = open_ended.map(|e| {
        let hint = e.hint.unwrap_or(damage[e.range].from_offset);
        let rp_next = rp
            .filter(|rp| rp.segment_base == bases[last])
            .map(|rp| rp.next_offset);
        hint.max(rp_next.unwrap_or(0))
    });
    if let Some(rp) = rp_after_last
        && let Some(end) = expected
        && rp.next_offset > end
        && tail_damage.is_none()
    {
        tracing::error!(dir = %dir.display(), from = end, to = rp.next_offset, "segments at the end of the log are missing: quarantining their offsets");
        let path = log_path(dir, rp.segment_base);
        let mut range = DamagedRange {
            from_offset: end,
            to_offset: Some(rp.next_offset),
            segment: path,
            segment_base: rp.segment_base,
            position: 0,
            end_position: 0,
            reason: format!(
                "the segment files for offsets {end}..{} are missing (the recovery point names segment {})",
                rp.next_offset, rp.segment_base
            ),
            accepted: false,
        };
        range.accepted = accepted.iter().any(|a| a.matches(&range));
        damage.push(range);
        tail_damage = Some(rp.next_offset);
    }
    for range in &mut damage {
        if !range.accepted && accepted.iter().any(|a| a.matches(range)) {
            range.accepted = true;
        }
    }
    drop_contained(&mut damage);

    // What recovery kept may have been only in the page cache (a process crash): make
    // it durable before a recovery point says so.
    for (segment, file, _) in &segments[first_unsafe.min(last)..] {
        file.sync_data()
            .map_err(io_err("sync segment", &segment.path))?;
    }
    // Sealed segments are read through the shared file cache from here on.
    for (segment, _, _) in &segments[..last] {
        segment.index_mut().release_files();
        segment.file.unpin();
    }
    let (active, file, first_ts) = segments.last().cloned().expect("at least one segment");
    let written_len = active.visible_len();
    let next_offset = active.next_offset();
    // The point, and the directory entries of what recovery kept, are made durable
    // whatever this open found: after a process crash a point that reads back fine may
    // never have reached the disk (a crash while a new log wrote its first one), and
    // nothing syncs it later, so every later power loss would recover without one,
    // unable to cut a torn tail; and a crash inside a roll leaves the new segment's
    // entry unsynced, so appends acknowledged into it would vanish with it.
    if active.has_damage() || tail_damage.is_some() || damage.iter().any(|d| !d.accepted) {
        // A recovery point at or before damage in the last segment would let the next
        // recovery cut it; and one past damage nobody accepted yet would make the next
        // open take the damaged segment for durable and check only its batch headers,
        // forgetting a torn batch whose header still parses. Leave the old one.
        tracing::warn!(dir = %dir.display(), "the log is damaged: the recovery point stays where it was");
        io.sync_dir(dir).map_err(io_err("sync directory", dir))?;
    } else {
        RecoveryPoint {
            segment_base: active.base_offset,
            position: written_len,
            next_offset,
            max_timestamp_us: last_max_ts,
        }
        .write_durable(io, dir)
        .map_err(io_err("write recovery point", dir))?;
    }
    let writer = Writer::new(
        config,
        active,
        file,
        WriterState {
            written_len,
            next_offset,
            last_max_ts,
            segment_first_ts: first_ts,
            tail_damage,
        },
    );
    Ok(Recovered {
        segments: segments.into_iter().map(|(s, _, _)| s).collect(),
        writer,
        damage,
    })
}

/// Creates the log's directory (and any missing parents) and makes its entry durable:
/// a new entry survives a power loss only once the directory holding it is synced, and
/// without this a log's every acknowledged batch could vanish with its directory.
/// The parent is synced on every open, not only when the directory is new, because an
/// earlier open may have created it and crashed before syncing. Parents that already
/// existed are the caller's to have made durable (the broker's data directory).
fn create_log_dir(io: &dyn Io, dir: &Path) -> Result<(), StorageError> {
    let created: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !io.is_dir(p))
        .collect();
    io.create_dir_all(dir)
        .map_err(io_err("create directory", dir))?;
    let mut parents: Vec<&Path> = created.iter().filter_map(|p| p.parent()).collect();
    if let Some(parent) = dir.parent()
        && !parents.contains(&parent)
    {
        parents.push(parent);
    }
    for parent in parents {
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        io.sync_dir(parent)
            .map_err(io_err("sync directory", parent))?;
    }
    Ok(())
}

/// The writer's starting state, as recovery found it.
pub(crate) struct WriterState {
    pub(crate) written_len: u64,
    pub(crate) next_offset: u64,
    pub(crate) last_max_ts: Option<i64>,
    pub(crate) segment_first_ts: Option<i64>,
    /// The last segment ends in damage: a lower bound for the offset appends may resume
    /// at once the loss is accepted.
    pub(crate) tail_damage: Option<u64>,
}

/// Deletes `.index`/`.timeindex` files whose `.log` is gone (a crash during retention).
fn remove_orphan_indexes(
    io: &dyn Io,
    entries: &[std::path::PathBuf],
    bases: &[u64],
) -> Result<(), StorageError> {
    for path in entries {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let stem = name
            .strip_suffix(".index")
            .or_else(|| name.strip_suffix(".timeindex"));
        let Some(stem) = stem else { continue };
        let Ok(base) = stem.parse::<u64>() else {
            continue;
        };
        if stem.len() == 20 && bases.binary_search(&base).is_err() {
            io.remove_file(path)
                .map_err(io_err("remove orphan index", path))?;
            tracing::info!(path = %path.display(), "removed index without a segment");
        }
    }
    Ok(())
}

/// A durable segment must be a complete chain of batches: check the chain from the last
/// index entry (or everywhere, rebuilding the index, if the index is unusable).
/// `None` if the chain breaks: the caller validates the whole segment to find the
/// damage.
fn open_sealed(
    segment: &Segment,
    file: &dyn IoFile,
    config: &LogConfig,
    len: u64,
    index_ok: bool,
) -> Result<Option<Tail>, StorageError> {
    if len == 0 {
        return Ok(Some(Tail {
            next_offset: segment.base_offset,
            max_ts: None,
            first_ts: None,
        }));
    }
    let last = index_ok.then(|| segment.index().last()).flatten();
    if let Some(entry) = last
        && u64::from(entry.position) < len
    {
        let mut scanner = Scanner::new(file, &segment.path, u64::from(entry.position), len)
            .chaining(segment.base_offset + u64::from(entry.rel_offset));
        if let Some(tail) = scan_to_end(&mut scanner, |_| Ok(()))? {
            segment.set_visible_len(len);
            let first_ts = first_timestamp(segment, file, len)?;
            return Ok(Some(Tail { first_ts, ..tail }));
        }
    }
    // The index is missing, damaged or wrong: rebuild it from a full scan.
    let mut entries = Vec::new();
    let mut cadence = IndexCadence::new(config.index_interval_bytes, None);
    let mut scanner = Scanner::new(file, &segment.path, 0, len).chaining(segment.base_offset);
    let tail = scan_to_end(&mut scanner, |found| {
        if cadence.take(found.position)
            && let Some(e) = entry_for(segment.base_offset, found)
        {
            entries.push(e);
        }
        Ok(())
    })?;
    let Some(tail) = tail else {
        return Ok(None);
    };
    segment.index_mut().rewrite(&entries)?;
    tracing::info!(path = %segment.path.display(), entries = entries.len(), "rebuilt segment index");
    segment.set_visible_len(len);
    let first_ts = first_timestamp(segment, file, len)?;
    Ok(Some(Tail { first_ts, ..tail }))
}

/// Scans to the end of the scanner's range. `None` if the chain breaks first.
fn scan_to_end(
    scanner: &mut Scanner<'_>,
    mut on_batch: impl FnMut(&Found) -> Result<(), StorageError>,
) -> Result<Option<Tail>, StorageError> {
    let mut next_offset = None;
    let mut max_ts = None;
    loop {
        match scanner.next_batch()? {
            Ok(Some(found)) => {
                on_batch(&found)?;
                next_offset = found.header.next_offset();
                max_ts = Some(found.header.max_timestamp_us);
            }
            Ok(None) => break,
            Err(_) => return Ok(None),
        }
    }
    Ok(next_offset.map(|next_offset| Tail {
        next_offset,
        max_ts,
        first_ts: None,
    }))
}

fn first_timestamp(
    segment: &Segment,
    file: &dyn IoFile,
    len: u64,
) -> Result<Option<i64>, StorageError> {
    if len == 0 {
        return Ok(None);
    }
    let mut scanner = Scanner::new(file, &segment.path, 0, len)
        .with_chunk(rill_format::BATCH_HEADER_LEN)
        .skipping(segment.damaged());
    Ok(match scanner.next_batch()? {
        Ok(Some(found)) => Some(found.header.first_timestamp_us),
        _ => None,
    })
}

/// A full validation of one segment, recording the damage it quarantines.
struct Scan<'a> {
    segment: &'a Segment,
    file: &'a dyn IoFile,
    config: &'a LogConfig,
    len: u64,
    damage: &'a mut Vec<DamagedRange>,
    /// Set if quarantined damage runs to the end of the segment.
    open_ended: Option<OpenEnded>,
}

impl Scan<'_> {
    /// Validates a segment at or after the recovery point: from the point (when it names
    /// this segment and checks out) or from the start.
    fn validate(
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
    fn run(
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
                        if cadence.take(found.position)
                            && let Some(entry) = entry_for(base, &found)
                        {
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
fn drop_contained(damage: &mut Vec<DamagedRange>) {
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
fn apply_accepted(
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
