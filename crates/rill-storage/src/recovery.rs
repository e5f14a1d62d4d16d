//! Opening a log: find the segments, check the sealed ones, repair the tail of the last
//! one (`docs/FORMAT.md` §4, "Recovery on open").

use std::path::Path;
use std::sync::Arc;

use crate::StorageError;
use crate::config::LogConfig;
use crate::error::io_err;
use crate::index::SegmentIndex;
use crate::io::Io;
use crate::log::{Writer, corrupt, create_segment};
use crate::recovery_point::RecoveryPoint;
use crate::segment::{
    Found, IndexCadence, ScanStop, Scanner, Segment, entry_for, parse_log_name,
    remove_segment_files,
};

pub(crate) struct Recovered {
    pub(crate) segments: Vec<Arc<Segment>>,
    pub(crate) writer: Writer,
}

/// What a scan of a segment found.
struct Tail {
    next_offset: u64,
    max_ts: Option<i64>,
    first_ts: Option<i64>,
}

pub(crate) fn recover(
    dir: &Path,
    config: &LogConfig,
    io: &dyn Io,
) -> Result<Recovered, StorageError> {
    io.create_dir_all(dir)
        .map_err(io_err("create directory", dir))?;
    let entries = io.read_dir(dir).map_err(io_err("list directory", dir))?;
    let mut bases: Vec<u64> = entries.iter().filter_map(|p| parse_log_name(p)).collect();
    bases.sort_unstable();
    remove_orphan_indexes(io, &entries, &bases)?;

    if bases.is_empty() {
        let segment = Arc::new(create_segment(io, dir, config.initial_offset)?);
        let writer = new_writer(
            config,
            Arc::clone(&segment),
            0,
            config.initial_offset,
            None,
            None,
        );
        return Ok(Recovered {
            segments: vec![segment],
            writer,
        });
    }

    // Everything before the recovery point is durable; everything after it may have
    // been torn by a crash, in any segment, so it is validated batch by batch.
    let rp = RecoveryPoint::read(io, dir);
    let first_unsafe = rp
        .and_then(|rp| bases.binary_search(&rp.segment_base).ok())
        .unwrap_or(0);

    let mut segments: Vec<(Arc<Segment>, Option<i64>)> = Vec::with_capacity(bases.len());
    let mut expected: Option<u64> = None;
    let mut last_max_ts: Option<i64> = None;
    let mut cut = false;
    for (i, &base) in bases.iter().enumerate() {
        let path = crate::segment::log_path(dir, base);
        if cut {
            // After a torn batch: later segments hold writes that were never durable
            // and would leave a gap in the offsets.
            remove_segment_files(io, dir, base)?;
            tracing::warn!(path = %path.display(), "removed a segment written after a torn batch");
            continue;
        }
        if let Some(expected) = expected
            && base != expected
        {
            return Err(StorageError::Corrupt {
                path,
                position: 0,
                reason: format!(
                    "segment starts at offset {base}, previous segment ends at {expected}"
                ),
            });
        }
        let log = io
            .open(&path, false)
            .map_err(io_err("open segment", &path))?;
        let len = log.size().map_err(io_err("stat segment", &path))?;
        let (index, index_ok) = SegmentIndex::open(io, dir, base, len)?;
        let segment = Segment::new(base, path, log, index);
        let tail = if i < first_unsafe {
            open_sealed(&segment, config, len, index_ok)?
        } else {
            let from_rp = rp.filter(|rp| rp.segment_base == base);
            let (tail, end) = validate_segment(&segment, config, len, from_rp, last_max_ts)?;
            cut = end < len;
            tail
        };
        segment.set_next_offset(tail.next_offset);
        if let Some(ts) = tail.max_ts {
            segment.observe_timestamp(ts);
            last_max_ts = Some(last_max_ts.map_or(ts, |m| m.max(ts)));
        }
        expected = Some(tail.next_offset);
        segments.push((Arc::new(segment), tail.first_ts));
    }

    // What recovery kept may have been only in the page cache (a process crash): make
    // it durable before the recovery point says so.
    for (segment, _) in &segments[first_unsafe.min(segments.len() - 1)..] {
        segment
            .log
            .sync_data()
            .map_err(io_err("sync segment", &segment.path))?;
    }
    let (active, first_ts) = segments.last().cloned().expect("at least one segment");
    let written_len = active.visible_len();
    let next_offset = active.next_offset();
    RecoveryPoint {
        segment_base: active.base_offset,
        position: written_len,
        next_offset,
        max_timestamp_us: last_max_ts,
    }
    .write(io, dir);
    let writer = new_writer(
        config,
        active,
        written_len,
        next_offset,
        last_max_ts,
        first_ts,
    );
    Ok(Recovered {
        segments: segments.into_iter().map(|(s, _)| s).collect(),
        writer,
    })
}

fn new_writer(
    config: &LogConfig,
    active: Arc<Segment>,
    written_len: u64,
    next_offset: u64,
    last_max_ts: Option<i64>,
    segment_first_ts: Option<i64>,
) -> Writer {
    let cadence = IndexCadence::new(config.index_interval_bytes, active.index().last());
    Writer {
        active,
        written_len,
        next_offset,
        last_max_ts,
        segment_first_ts,
        cadence,
        seq: 0,
        closed: false,
    }
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

/// A sealed segment was synced when it was rolled, so it must be a complete chain of
/// batches: check the chain from the last index entry (or everywhere, rebuilding the
/// index, if the index is unusable).
fn open_sealed(
    segment: &Segment,
    config: &LogConfig,
    len: u64,
    index_ok: bool,
) -> Result<Tail, StorageError> {
    if len == 0 {
        return Ok(Tail {
            next_offset: segment.base_offset,
            max_ts: None,
            first_ts: None,
        });
    }
    let last = index_ok.then(|| segment.index().last()).flatten();
    if let Some(entry) = last
        && u64::from(entry.position) < len
    {
        let mut scanner = Scanner::new(
            segment.log.as_ref(),
            &segment.path,
            u64::from(entry.position),
            len,
        )
        .chaining(segment.base_offset + u64::from(entry.rel_offset));
        if let Some(tail) = scan_to_end(&mut scanner, |_| Ok(()))? {
            segment.set_visible_len(len);
            let first_ts = first_timestamp(segment, len)?;
            return Ok(Tail { first_ts, ..tail });
        }
    }
    // The index is missing, damaged or wrong: rebuild it from a full scan.
    let mut entries = Vec::new();
    let mut cadence = IndexCadence::new(config.index_interval_bytes, None);
    let mut scanner =
        Scanner::new(segment.log.as_ref(), &segment.path, 0, len).chaining(segment.base_offset);
    let tail = scan_to_end(&mut scanner, |found| {
        if cadence.take(found.position)
            && let Some(e) = entry_for(segment.base_offset, found)
        {
            entries.push(e);
        }
        Ok(())
    })?;
    let Some(tail) = tail else {
        return Err(corrupt(
            &segment.path,
            scanner.position(),
            &"sealed segment is damaged",
        ));
    };
    segment.index_mut().rewrite(&entries)?;
    tracing::info!(path = %segment.path.display(), entries = entries.len(), "rebuilt segment index");
    segment.set_visible_len(len);
    let first_ts = first_timestamp(segment, len)?;
    Ok(Tail { first_ts, ..tail })
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

fn first_timestamp(segment: &Segment, len: u64) -> Result<Option<i64>, StorageError> {
    if len == 0 {
        return Ok(None);
    }
    let mut scanner = Scanner::new(segment.log.as_ref(), &segment.path, 0, len)
        .with_chunk(rill_format::BATCH_HEADER_LEN);
    Ok(match scanner.next_batch()? {
        Ok(Some(found)) => Some(found.header.first_timestamp_us),
        _ => None,
    })
}

/// Validates a segment at or after the recovery point: from the point (when it names
/// this segment and checks out) or from the start, truncating the file at the first
/// torn or invalid batch. Returns what it found and where the valid data ends.
fn validate_segment(
    segment: &Segment,
    config: &LogConfig,
    len: u64,
    rp: Option<RecoveryPoint>,
    max_ts_before: Option<i64>,
) -> Result<(Tail, u64), StorageError> {
    let base = segment.base_offset;
    if let Some(rp) = rp.filter(|rp| rp.position <= len && rp.next_offset >= base)
        && last_entry_below_is_sound(segment, rp.position, len)?
    {
        if let Some(found) = scan_tail(
            segment,
            config,
            len,
            rp.position,
            rp.next_offset,
            rp.max_timestamp_us,
        )? {
            return Ok(found);
        }
        tracing::warn!(path = %segment.path.display(), "recovery point does not match the segment; validating all of it");
    }
    Ok(scan_tail(segment, config, len, 0, base, max_ts_before)?
        .expect("a scan from the start always fits"))
}

/// Whether the last index entry below `position` points at a batch header with the
/// offset it claims. Entries below the recovery point are kept without a scan, so a
/// damaged index is caught here (and the whole segment rescanned) rather than by reads.
fn last_entry_below_is_sound(
    segment: &Segment,
    position: u64,
    len: u64,
) -> Result<bool, StorageError> {
    let entry = segment
        .index()
        .entries()
        .iter()
        .take_while(|e| u64::from(e.position) < position)
        .last()
        .copied();
    let Some(entry) = entry else { return Ok(true) };
    let mut scanner = Scanner::new(
        segment.log.as_ref(),
        &segment.path,
        u64::from(entry.position),
        len,
    )
    .with_chunk(rill_format::BATCH_HEADER_LEN)
    .chaining(segment.base_offset + u64::from(entry.rel_offset));
    Ok(matches!(scanner.next_batch()?, Ok(Some(_))))
}

/// Validates `[start, len)` of the active segment, expecting `expected` as the first
/// offset. `None` if a valid batch at `start` has another offset (the recovery point
/// does not describe this file).
fn scan_tail(
    segment: &Segment,
    config: &LogConfig,
    len: u64,
    start: u64,
    expected: u64,
    max_ts_before: Option<i64>,
) -> Result<Option<(Tail, u64)>, StorageError> {
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
    let mut cadence = IndexCadence::new(config.index_interval_bytes, segment.index().last());
    let mut scanner =
        Scanner::new(segment.log.as_ref(), &segment.path, start, len).validating(expected);
    let mut next_offset = expected;
    let mut max_ts = max_ts_before;
    let mut first = true;
    let end = loop {
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
            Ok(None) => break len,
            Err(ScanStop::OffsetMismatch { .. }) if first && start > 0 => return Ok(None),
            Err(stop) => {
                let at = scanner.position();
                warn_truncation(segment, at, len, &stop);
                break at;
            }
        }
        first = false;
    };
    if end < len {
        segment
            .log
            .set_len(end)
            .map_err(io_err("truncate segment", &segment.path))?;
    }
    segment.set_visible_len(end);
    let first_ts = first_timestamp(segment, end)?;
    Ok(Some((
        Tail {
            next_offset,
            max_ts,
            first_ts,
        },
        end,
    )))
}

fn warn_truncation(segment: &Segment, at: u64, len: u64, stop: &ScanStop) {
    tracing::warn!(
        path = %segment.path.display(),
        position = at,
        dropped_bytes = len - at,
        reason = %stop,
        "truncating torn or invalid tail of the active segment"
    );
}
