//! Recovery on damaged `.index`, `.timeindex` and `recovery-point` files
//! (`docs/FORMAT.md` §4) beside intact `.log` segments.
//!
//! The input writes a log of several small segments through the engine, with a fixed
//! clock, keeping every recovery point it wrote on the way; then it damages the hint
//! files — mostly well-formed entries with one field moved, dropped, duplicated or
//! swapped, sometimes raw bytes, torn lengths, missing files or orphan indexes — and
//! replaces the recovery point with a stale one, a torn one, none, or one whose fields
//! were changed.
//!
//! Indexes are hints and a genuine recovery point (current or stale) only names durable
//! data, so with those damages the log must open with every batch intact: the same
//! offsets, each offset read back inside the batch that holds it, byte for byte, the
//! same timestamp lookups as the model, appends at the old end, and a second open that
//! agrees. A recovery point whose fields were changed and re-sealed is trusted by
//! design, so then only: open returns `Ok` or a typed error, everything readable parses
//! in offset order, and the log appends and reopens.
#![no_main]

mod common;

use std::path::Path;
use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rill_format::NewRecord;
use rill_storage::{Durability, LogConfig, ManualClock, PartitionLog, StdIo, StorageError};

const START_US: i64 = 1_700_000_000_000_000;
const RP_FILE: &str = "recovery-point";

#[derive(Arbitrary, Debug)]
struct BatchIn<'a> {
    values: Vec<&'a [u8]>,
    /// Clock movement before the append; negative moves are stamped as no movement.
    advance_us: i16,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum EntryEdit {
    Drop(u8),
    Duplicate(u8),
    Swap(u8, u8),
    AddRelative(u8, i16),
    AddPosition(u8, i16),
    AddTimestamp(u8, i32),
    /// The time index names another offset than the offset index.
    TimeRelative(u8, u32),
    Append(u32, u32, i64),
}

#[derive(Arbitrary, Debug)]
enum Damage<'a> {
    Entries {
        segment: u8,
        edit: EntryEdit,
    },
    RawIndex {
        segment: u8,
        time: bool,
        bytes: &'a [u8],
    },
    SetLen {
        segment: u8,
        time: bool,
        len: u16,
    },
    Remove {
        segment: u8,
        time: bool,
    },
    /// Index files of a segment that does not exist (retention crashed between deletes).
    Orphan {
        base: u16,
    },
    /// Files recovery must ignore.
    Stray {
        name: u8,
        bytes: &'a [u8],
    },
}

#[derive(Arbitrary, Debug)]
enum RecoveryPointIn<'a> {
    Keep,
    Remove,
    /// One written earlier (after some sync), as a crash can leave it.
    Stale(u8),
    /// Torn: a byte changed, the CRC not updated.
    Torn(u8, u8),
    /// A field changed and the CRC re-sealed: trusted, so content may be lost.
    Resealed {
        field: u8,
        delta: i32,
    },
    Raw(&'a [u8]),
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    batches: Vec<BatchIn<'a>>,
    index_interval: u8,
    damages: Vec<Damage<'a>>,
    recovery_point: RecoveryPointIn<'a>,
}

/// One stored batch of the original log.
struct Stored {
    base: u64,
    next: u64,
    bytes: Vec<u8>,
    /// Timestamps of its records, in offset order.
    timestamps: Vec<i64>,
}

fn config(index_interval: u8) -> LogConfig {
    LogConfig {
        durability: Durability::Always,
        segment_bytes_max: 1024,
        index_interval_bytes: [64, 200, 1024, 4096][usize::from(index_interval) % 4],
        segment_age_max: None,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, config: &LogConfig) -> Result<PartitionLog, StorageError> {
    let clock = Arc::new(ManualClock::new(START_US + 1_000_000_000));
    PartitionLog::open_with(dir, config.clone(), Arc::new(StdIo), clock)
}

fn segment_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let stem = name.strip_suffix(".log")?;
            (stem.len() == 20).then(|| stem.parse().ok()).flatten()
        })
        .collect();
    bases.sort_unstable();
    bases
}

fn read_all(log: &PartitionLog) -> Vec<Stored> {
    let mut out = Vec::new();
    let mut at = log.log_start();
    while at < log.next_offset() {
        let read = log.read(at, 1 << 20).unwrap();
        for batch in read.batches() {
            let batch = batch.unwrap();
            let header = batch.header();
            out.push(Stored {
                base: header.base_offset,
                next: header.next_offset().unwrap(),
                bytes: batch.as_bytes().to_vec(),
                timestamps: batch.records().map(|r| r.timestamp_us).collect(),
            });
        }
        at = read.next_offset;
    }
    out
}

fn entries_of(bytes: &[u8], width: usize) -> Vec<Vec<u8>> {
    bytes.chunks_exact(width).map(<[u8]>::to_vec).collect()
}

fn edit_entries(dir: &Path, base: u64, edit: EntryEdit) {
    let index = dir.join(format!("{base:020}.index"));
    let time = dir.join(format!("{base:020}.timeindex"));
    let mut offsets = entries_of(&std::fs::read(&index).unwrap_or_default(), 8);
    let mut times = entries_of(&std::fs::read(&time).unwrap_or_default(), 12);
    let n = offsets.len().min(times.len());
    let at = |i: u8| usize::from(i) % n.max(1);
    let add_u32 = |field: &mut [u8], delta: i64| {
        let v = u32::from_le_bytes(field[..4].try_into().unwrap());
        field[..4].copy_from_slice(&((i64::from(v) + delta) as u32).to_le_bytes());
    };
    match edit {
        EntryEdit::Append(rel, position, ts) => {
            offsets.push([rel.to_le_bytes(), position.to_le_bytes()].concat());
            times.push([&ts.to_le_bytes()[..], &rel.to_le_bytes()].concat());
        }
        _ if n == 0 => return,
        EntryEdit::Drop(i) => {
            offsets.remove(at(i));
            times.remove(at(i));
        }
        EntryEdit::Duplicate(i) => {
            offsets.insert(at(i), offsets[at(i)].clone());
            times.insert(at(i), times[at(i)].clone());
        }
        EntryEdit::Swap(i, j) => {
            offsets.swap(at(i), at(j));
            times.swap(at(i), at(j));
        }
        EntryEdit::AddRelative(i, d) => {
            add_u32(&mut offsets[at(i)][0..4], i64::from(d));
            add_u32(&mut times[at(i)][8..12], i64::from(d));
        }
        EntryEdit::AddPosition(i, d) => add_u32(&mut offsets[at(i)][4..8], i64::from(d)),
        EntryEdit::AddTimestamp(i, d) => {
            let t = &mut times[at(i)];
            let v = i64::from_le_bytes(t[0..8].try_into().unwrap());
            t[0..8].copy_from_slice(&v.wrapping_add(i64::from(d)).to_le_bytes());
        }
        EntryEdit::TimeRelative(i, rel) => times[at(i)][8..12].copy_from_slice(&rel.to_le_bytes()),
    }
    std::fs::write(&index, offsets.concat()).unwrap();
    std::fs::write(&time, times.concat()).unwrap();
}

fn reseal(rp: &mut [u8]) {
    let crc = crc32c::crc32c(&rp[..40]);
    rp[40..44].copy_from_slice(&crc.to_le_bytes());
}

/// Where each batch of each segment starts: `(relative offset, position, first
/// timestamp)`, the entries a truthful index may hold.
fn batch_starts(dir: &Path, bases: &[u64]) -> Vec<(u64, u64, Vec<(u32, u32, i64)>)> {
    bases
        .iter()
        .map(|&base| {
            let log = std::fs::read(dir.join(format!("{base:020}.log"))).unwrap();
            let mut starts = Vec::new();
            let mut position = 0usize;
            for batch in rill_format::Batches::new(&log) {
                let batch = batch.unwrap();
                let header = batch.header();
                starts.push((
                    (header.base_offset - base) as u32,
                    position as u32,
                    header.first_timestamp_us,
                ));
                position += batch.as_bytes().len();
            }
            (base, log.len() as u64, starts)
        })
        .collect()
}

/// Whether every segment's index files are either malformed by the rules recovery
/// checks (`docs/FORMAT.md` §4: whole entries, as many in both files, the same offsets,
/// strictly increasing offsets and positions, non-decreasing timestamps), so they are
/// rebuilt, or hold only truthful entries. Well-formed but untruthful entries are only
/// caught where an entry is used.
fn hints_detectable(dir: &Path, starts: &[(u64, u64, Vec<(u32, u32, i64)>)]) -> bool {
    starts.iter().all(|(base, len, real)| {
        let offsets = std::fs::read(dir.join(format!("{base:020}.index"))).unwrap_or_default();
        let times = std::fs::read(dir.join(format!("{base:020}.timeindex"))).unwrap_or_default();
        if offsets.len() % 8 != 0 || times.len() % 12 != 0 || offsets.len() / 8 != times.len() / 12
        {
            return true;
        }
        if (offsets.len() / 8) as u64 > len / 64 + 1 {
            return true;
        }
        let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let entries: Vec<(u32, u32, i64, u32)> = offsets
            .chunks_exact(8)
            .zip(times.chunks_exact(12))
            .map(|(o, t)| {
                (
                    u32_at(o, 0),
                    u32_at(o, 4),
                    i64::from_le_bytes(t[0..8].try_into().unwrap()),
                    u32_at(t, 8),
                )
            })
            .collect();
        let malformed = entries.iter().any(|e| e.0 != e.3)
            || entries
                .windows(2)
                .any(|w| w[1].0 <= w[0].0 || w[1].1 <= w[0].1 || w[1].2 < w[0].2);
        malformed || entries.iter().all(|e| real.contains(&(e.0, e.1, e.2)))
    })
}

/// Whether well-formed but untruthful index entries are held to the full properties
/// too, and logs opened from a re-sealed recovery point to consistency (consecutive
/// offsets, a reopen that agrees). On by default: timestamp lookups check the batch an
/// index entry points to, and recovery checks that a recovery point names a batch
/// boundary with its offset (both bugs once; reproducers in
/// `fuzz/regressions/log_files/`). `RILL_FUZZ_STRICT=0` relaxes it.
fn strict() -> bool {
    static STRICT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STRICT.get_or_init(|| std::env::var_os("RILL_FUZZ_STRICT").is_none_or(|v| v != "0"))
}

/// The first offset whose record is stamped at or after `ts`, from the model.
fn model_lookup(stored: &[Stored], ts: i64) -> Option<u64> {
    stored.iter().find_map(|b| {
        b.timestamps
            .iter()
            .position(|&t| t >= ts)
            .map(|i| b.base + i as u64)
    })
}

/// Every read from `log_start` on parses and moves forward (with `ordered`, through
/// consecutive batches); a damaged batch may only surface as `Corrupt`. Unordered: see
/// `strict`.
fn walk(log: &PartitionLog, ordered: bool) {
    let mut at = log.log_start();
    while at < log.next_offset() {
        let read = match log.read(at, 4096) {
            Ok(read) => read,
            Err(StorageError::Corrupt { .. }) => return,
            Err(e) => panic!("read at {at}: {e}"),
        };
        let mut expect = None;
        for batch in read.batches() {
            let Ok(batch) = batch else { return };
            let header = batch.header();
            if let Some(e) = expect
                && ordered
            {
                assert_eq!(header.base_offset, e, "batches are consecutive");
            }
            expect = header.next_offset();
        }
        if read.bytes.is_empty() {
            assert!(!ordered, "a read before the end returns a batch");
            // A hole a re-sealed recovery point made: no read crosses it.
            return;
        }
        assert!(read.next_offset > at);
        at = read.next_offset;
    }
}

fuzz_target!(|input: Input<'_>| {
    let scratch = common::scratch_dir();
    let dir = scratch.path();
    let config = config(input.index_interval);

    // A log of a few small segments, with each recovery point it wrote.
    let clock = Arc::new(ManualClock::new(START_US));
    let log = PartitionLog::open_with(dir, config.clone(), Arc::new(StdIo), clock.clone()).unwrap();
    let mut history = Vec::new();
    for b in input.batches.iter().take(40) {
        if b.values.is_empty() {
            continue;
        }
        clock.advance_us(i64::from(b.advance_us));
        let mut builder = rill_format::BatchBuilder::new();
        for (i, value) in b.values.iter().take(8).enumerate() {
            let value = &value[..value.len().min(200)];
            builder
                .push(NewRecord::value(value).timestamp_delta_us(i as u64))
                .unwrap();
        }
        log.append(&builder.finish().unwrap()).unwrap();
        if let Ok(rp) = std::fs::read(dir.join(RP_FILE)) {
            history.push(rp);
        }
    }
    let stored = read_all(&log);
    let next = log.next_offset();
    log.close().unwrap();
    drop(log);
    let bases = segment_bases(dir);
    let starts = batch_starts(dir, &bases);

    // Damage the hints.
    for damage in input.damages.iter().take(4) {
        let pick = |s: u8| bases[usize::from(s) % bases.len()];
        let path = |base: u64, time: bool| {
            dir.join(format!(
                "{base:020}.{}",
                if time { "timeindex" } else { "index" }
            ))
        };
        match *damage {
            Damage::Entries { segment, edit } => edit_entries(dir, pick(segment), edit),
            Damage::RawIndex {
                segment,
                time,
                bytes,
            } => {
                std::fs::write(path(pick(segment), time), bytes).unwrap();
            }
            Damage::SetLen { segment, time, len } => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path(pick(segment), time));
                if let Ok(file) = file {
                    file.set_len(u64::from(len)).unwrap();
                }
            }
            Damage::Remove { segment, time } => {
                let _ = std::fs::remove_file(path(pick(segment), time));
            }
            Damage::Orphan { base } => {
                let base = u64::from(base);
                if !bases.contains(&base) {
                    std::fs::write(path(base, false), [0u8; 8]).unwrap();
                    std::fs::write(path(base, true), [0u8; 12]).unwrap();
                }
            }
            Damage::Stray { name, bytes } => {
                let names = [
                    "0.log",
                    "x.log",
                    "00000000000000000000.log.tmp",
                    "recovery-point.tmp",
                    "0000000000000000000a.log",
                ];
                std::fs::write(dir.join(names[usize::from(name) % names.len()]), bytes).unwrap();
            }
        }
    }
    let rp_path = dir.join(RP_FILE);
    // A recovery point whose fields were changed and re-sealed: trusted by design.
    let mut trusted_damage = false;
    match &input.recovery_point {
        RecoveryPointIn::Keep => {}
        RecoveryPointIn::Remove => {
            let _ = std::fs::remove_file(&rp_path);
        }
        RecoveryPointIn::Stale(i) => {
            if !history.is_empty() {
                std::fs::write(&rp_path, &history[usize::from(*i) % history.len()]).unwrap();
            }
        }
        RecoveryPointIn::Torn(at, flip) => {
            if let Ok(mut rp) = std::fs::read(&rp_path) {
                if *flip != 0 && !rp.is_empty() {
                    let i = usize::from(*at) % rp.len();
                    rp[i] ^= flip;
                    std::fs::write(&rp_path, rp).unwrap();
                }
            }
        }
        RecoveryPointIn::Resealed { field, delta } => {
            if let Ok(mut rp) = std::fs::read(&rp_path) {
                // segment_base, position, next_offset, the max-timestamp flag, max_timestamp_us.
                let at = [4, 12, 20, 28, 32][usize::from(*field) % 5];
                let width = if at == 28 { 1 } else { 8 };
                let mut v = [0u8; 8];
                v[..width].copy_from_slice(&rp[at..at + width]);
                let v = u64::from_le_bytes(v).wrapping_add(*delta as i64 as u64);
                rp[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
                reseal(&mut rp);
                trusted_damage = *delta != 0;
                std::fs::write(&rp_path, rp).unwrap();
            }
        }
        RecoveryPointIn::Raw(bytes) => {
            let mut rp = bytes.to_vec();
            // A raw point with a valid CRC is a trusted one, as above.
            trusted_damage = rp.len() == 44 && {
                let mut sealed = rp.clone();
                reseal(&mut sealed);
                sealed == rp
            };
            rp.truncate(64);
            std::fs::write(&rp_path, rp).unwrap();
        }
    }

    // Well-formed index entries that point elsewhere than they say.
    let untruthful = !hints_detectable(dir, &starts) && !strict();
    let log = match open(dir, &config) {
        Ok(log) => log,
        Err(e) if trusted_damage => {
            let _ = e.to_string();
            return;
        }
        Err(e) => panic!("damaged hints must not stop the log from opening: {e}"),
    };
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name
            .strip_suffix(".index")
            .or_else(|| name.strip_suffix(".timeindex"))
        {
            assert!(
                dir.join(format!("{stem}.log")).exists(),
                "orphan index {name} was removed"
            );
        }
    }
    if trusted_damage {
        walk(&log, strict());
    } else {
        // With exact hints or not, recovery of intact segments loses nothing.
        assert_eq!(log.log_start(), 0);
        assert_eq!(log.next_offset(), next, "no batch is lost to damaged hints");
        let exact = !untruthful;
        // Every offset reads back inside the batch that holds it, byte for byte. An
        // untruthful entry may make a read fail as `Corrupt` instead.
        for b in &stored {
            for from in b.base..b.next {
                match log.read(from, 1) {
                    Ok(read) if exact => {
                        let got = read.batches().next().expect("a batch").expect("valid");
                        assert_eq!(
                            got.as_bytes(),
                            &b.bytes[..],
                            "the batch holding offset {from}"
                        );
                        assert_eq!(read.next_offset, b.next);
                    }
                    Ok(read) => assert!(read.batches().all(|b| b.is_ok())),
                    Err(StorageError::Corrupt { .. }) if !exact => {}
                    Err(e) => panic!("read at {from}: {e}"),
                }
            }
        }
        let mut probes = vec![i64::MIN, 0, START_US - 1, i64::MAX];
        for b in &stored {
            for &t in &b.timestamps {
                probes.extend([t - 1, t, t + 1]);
            }
        }
        for ts in probes {
            match log.offset_for_timestamp(ts) {
                Ok(got) if exact => {
                    assert_eq!(
                        got,
                        model_lookup(&stored, ts),
                        "first offset at or after {ts}"
                    );
                }
                Ok(got) => assert!(got.is_none_or(|o| o < next)),
                Err(StorageError::Corrupt { .. }) if !exact => {}
                Err(e) => panic!("lookup of {ts}: {e}"),
            }
        }
    }
    let end = log.next_offset();
    let mut builder = rill_format::BatchBuilder::new();
    builder.push(NewRecord::value(b"after")).unwrap();
    let appended = match log.append(&builder.finish().unwrap()) {
        Ok(appended) => {
            assert_eq!(appended.base_offset, end);
            1
        }
        // E.g. a re-sealed point that claims the log ends at u64::MAX.
        Err(e) if trusted_damage => {
            let _ = e.to_string();
            0
        }
        Err(e) => panic!("append after recovery: {e}"),
    };
    log.close().unwrap();
    drop(log);
    let again = open(dir, &config).expect("a recovered log reopens");
    if !trusted_damage || strict() {
        assert_eq!(again.next_offset(), end + appended, "a second open agrees");
    }
    if !trusted_damage && !untruthful {
        assert_eq!(
            read_all(&again)[..stored.len()]
                .iter()
                .map(|b| &b.bytes)
                .collect::<Vec<_>>(),
            stored.iter().map(|b| &b.bytes).collect::<Vec<_>>()
        );
    }
    walk(&again, !trusted_damage || strict());
});
