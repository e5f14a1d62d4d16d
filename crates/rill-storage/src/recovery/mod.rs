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
use crate::damage::{DamagedRange, read_accepted};
use crate::env::LogEnv;
use crate::error::io_err;
use crate::files::SegmentFile;
use crate::index::SegmentIndex;
use crate::io::{Io, IoFile};
use crate::log::{Writer, create_segment};

use self::scan::{Scan, apply_accepted, drop_contained};

mod scan;
use crate::recovery_point::RecoveryPoint;
use crate::segment::{Found, IndexCadence, ScanStop, Scanner, Segment, log_path, parse_log_name};

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
    // A crash may have come between a roll and the old segment's release of the
    // blocks reserved past its end (see `PartitionLog::preallocate`): free them.
    for (segment, file, _) in &segments[first_unsafe.min(last)..last] {
        crate::log::release_preallocated(&segment.path, file.as_ref());
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
        // The files may lack the last entries made before a crash: made again here.
        let mut cadence = IndexCadence::new(config.index_interval_bytes, Some(entry));
        let mut missing = Vec::new();
        let chained = scan_to_end(&mut scanner, |found| {
            if let Some(e) = cadence.entry(segment.base_offset, found) {
                missing.push(e);
            }
            Ok(())
        })?;
        if let Some(tail) = chained {
            let mut index = segment.index_mut();
            for e in missing {
                index.push(e)?;
            }
            drop(index);
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
        if let Some(e) = cadence.entry(segment.base_offset, found) {
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

/// Makes again the index entries missing between the index's last entry before `end`
/// (or the segment's start) and `end`, walking the batch headers in between: the files
/// may lack the last entries made before a crash (docs/FORMAT.md §4), and a reader
/// would otherwise scan that stretch batch by batch for every read in it. A break in
/// the chain, or a failed read or write, stops it with a warning at most: entries are
/// hints, and what lies below the recovery point was not read by an open before.
pub(super) fn complete_index(segment: &Segment, file: &dyn IoFile, config: &LogConfig, end: u64) {
    if let Err(e) = make_missing_entries(segment, file, config, end) {
        tracing::warn!(path = %segment.path.display(), error = %e, "could not make the segment's missing index entries again");
    }
}

fn make_missing_entries(
    segment: &Segment,
    file: &dyn IoFile,
    config: &LogConfig,
    end: u64,
) -> Result<(), StorageError> {
    let last = segment.index().last();
    let (from, offset) = match last {
        Some(e) => (
            u64::from(e.position),
            segment.base_offset + u64::from(e.rel_offset),
        ),
        None => (0, segment.base_offset),
    };
    if from >= end {
        return Ok(());
    }
    let mut cadence = IndexCadence::new(config.index_interval_bytes, last);
    let mut scanner = Scanner::new(file, &segment.path, from, end).chaining(offset);
    let mut index = segment.index_mut();
    while let Ok(Some(found)) = scanner.next_batch()? {
        if let Some(e) = cadence.entry(segment.base_offset, &found) {
            index.push(e)?;
        }
    }
    Ok(())
}
