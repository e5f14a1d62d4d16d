//! The workload of one seed: a log on a simulated disk, random steps until the disk
//! dies, then the restarts to check; and the report a failing seed prints.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rill_format::BatchBuilder;
use rill_storage::sim::{SimConfig, SimIo, SimRng};
use rill_storage::{Durability, Io, LogConfig, ManualClock, Memory, PartitionLog, StorageError};

use super::check::{Restart, durable_batches, ensure};
use super::{CRASH_OPS_EARLY_MAX, CRASH_OPS_MAX, DIR, EPOCHS, STEPS_MAX, TRACE_KEEP, Totals};

/// What the workload wrote: records `T{tag}:{i}:` followed by filler, so every record
/// read back names its batch and position.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) tag: u64,
    pub(crate) values: Vec<Vec<u8>>,
    pub(crate) bytes: Vec<u8>,
}

impl Batch {
    pub(crate) fn new(tag: u64, rng: &mut SimRng) -> Self {
        let records = rng.between(1, 5) as usize;
        let big = rng.chance(4);
        let mut builder = BatchBuilder::new();
        let mut values = Vec::with_capacity(records);
        for i in 0..records {
            let mut value = format!("T{tag}:{i}:").into_bytes();
            let pad = if big {
                rng.between(200, 1500)
            } else {
                rng.below(200)
            };
            value.extend((0..pad).map(|j| b'a' + ((tag + i as u64 + j) % 26) as u8));
            builder
                .push(rill_format::NewRecord::value(&value))
                .expect("a small record");
            values.push(value);
        }
        let bytes = builder.finish().expect("a small batch");
        Self { tag, values, bytes }
    }
}

/// The batch and record a record value names.
pub(crate) fn parse_value(value: &[u8]) -> Option<(u64, usize)> {
    let s = std::str::from_utf8(value.get(1..)?).ok()?;
    if value[0] != b'T' {
        return None;
    }
    let mut parts = s.splitn(3, ':');
    let tag = parts.next()?.parse().ok()?;
    let i = parts.next()?.parse().ok()?;
    Some((tag, i))
}

/// One seed's run: its configuration, drawn from the seed, and what the workload has
/// written and been told so far (the model the checks compare against).
pub(crate) struct Run {
    pub(crate) seed: u64,
    /// Every choice of the run comes from this.
    pub(crate) rng: SimRng,
    pub(crate) config: LogConfig,
    pub(crate) sim_config: SimConfig,
    /// Appending threads (1: appends are checked for dense offsets as they return).
    pub(crate) threads: u64,
    pub(crate) clock: Arc<ManualClock>,
    /// The last [`TRACE_KEEP`] workload steps, for the report.
    pub(crate) trace: VecDeque<String>,
    /// Every batch the workload tried to append, by tag.
    pub(crate) attempted: HashMap<u64, Arc<Batch>>,
    /// Acknowledged batches not (legitimately) lost since: tag → base offset.
    pub(crate) acked: BTreeMap<u64, u64>,
    /// The log start the last check found.
    pub(crate) log_start: u64,
    /// Below which an acknowledged purge made the records gone: no restart may serve
    /// them again.
    pub(crate) purged: u64,
    /// Past every offset ever handed out (what a consumer may have seen).
    pub(crate) offset_high: u64,
    pub(crate) next_tag: u64,
    /// The disk of the epoch running now, and the restart being checked, for the
    /// report.
    pub(crate) disk: Option<SimIo>,
    pub(crate) restart: Option<SimIo>,
    pub(crate) epoch: u64,
}

impl Run {
    pub(crate) fn new(seed: u64) -> Self {
        let mut rng = SimRng::new(seed);
        // Mostly `always`, whose promise is the strongest to check; small segments so
        // rolls are frequent, and a time index on every few batches.
        let durability = match rng.below(10) {
            0..7 => Durability::Always,
            7 => Durability::Never,
            _ => Durability::Interval(Duration::from_millis(100)),
        };
        let config = LogConfig {
            segment_bytes_max: *rng.pick(&[1024, 2048, 4096]),
            index_interval_bytes: *rng.pick(&[64, 256, 1024]),
            durability,
            retention_bytes: rng.chance(40).then(|| *rng.pick(&[3000, 8000])),
            retention_age: rng.chance(20).then_some(Duration::from_secs(10)),
            segment_age_max: Some(if rng.chance(20) {
                Duration::from_secs(3)
            } else {
                Duration::from_secs(7 * 24 * 3600)
            }),
            ..LogConfig::default()
        };
        let threads = if rng.chance(30) { rng.between(2, 3) } else { 1 };
        let (page_bytes, sector_bytes) = *rng.pick(&[(4096, 512), (1024, 256)]);
        let sim_config = SimConfig {
            page_bytes,
            sector_bytes,
            ..SimConfig::default()
        };
        Self {
            seed,
            rng,
            config,
            sim_config,
            threads,
            clock: Arc::new(ManualClock::new(1_700_000_000_000_000)),
            trace: VecDeque::new(),
            attempted: HashMap::new(),
            acked: BTreeMap::new(),
            log_start: 0,
            purged: 0,
            offset_high: 0,
            next_tag: 0,
            disk: None,
            restart: None,
            epoch: 0,
        }
    }

    fn note(&mut self, line: String) {
        if self.trace.len() == TRACE_KEEP {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("e{} {line}", self.epoch));
    }

    pub(crate) fn report(&self, failure: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "seed {}: {failure}", self.seed);
        let _ = writeln!(
            out,
            "config: {:?} threads {} disk {:?}",
            self.config, self.threads, self.sim_config
        );
        let _ = writeln!(out, "workload (last {TRACE_KEEP} steps):");
        for line in &self.trace {
            let _ = writeln!(out, "  {line}");
        }
        for (what, disk) in [
            ("before the crash", &self.disk),
            ("of the restart", &self.restart),
        ] {
            if let Some(disk) = disk {
                let tail = disk.trace_tail();
                let _ = writeln!(out, "disk operations {what} (last {}):", tail.len());
                for line in tail {
                    let _ = writeln!(out, "  {line}");
                }
            }
        }
        out
    }

    pub(crate) fn all_epochs(&mut self) -> Result<Totals, String> {
        let mut totals = Totals::default();
        let disk = SimIo::with_config(self.sim_config, self.seed);
        // The directories above the partition's are the broker's: made durable here as
        // the broker must. The partition's own directory is the log's to create.
        let parent = Path::new(DIR).parent().expect("a nested directory");
        disk.create_dir_all(parent).map_err(|e| e.to_string())?;
        for dir in parent.ancestors().skip(1) {
            disk.sync_dir(dir).map_err(|e| e.to_string())?;
        }
        let mut disk = disk;
        for epoch in 0..EPOCHS {
            self.epoch = epoch;
            disk = self.epoch(disk, &mut totals)?;
        }
        Ok(totals)
    }

    pub(crate) fn open(&self, disk: &SimIo) -> Result<PartitionLog, StorageError> {
        PartitionLog::open_with(
            DIR,
            self.config.clone(),
            Arc::new(disk.clone()),
            self.clock.clone(),
        )
    }

    pub(crate) fn new_batch(&mut self) -> Arc<Batch> {
        let tag = self.next_tag;
        self.next_tag += 1;
        let batch = Arc::new(Batch::new(tag, &mut self.rng));
        self.attempted.insert(tag, Arc::clone(&batch));
        batch
    }

    /// One epoch: run the workload until the disk dies, check every restart, return
    /// the disk the next epoch starts from.
    fn epoch(&mut self, disk: SimIo, totals: &mut Totals) -> Result<SimIo, String> {
        self.disk = Some(disk.clone());
        self.restart = None;
        // Often early: in recovery, or before the first sync after it, where a restart
        // that forgot to make something durable is caught.
        let crash_at = if self.rng.chance(40) {
            self.rng.below(CRASH_OPS_EARLY_MAX)
        } else {
            self.rng.below(CRASH_OPS_MAX)
        };
        disk.crash_after(crash_at);
        self.note(format!("crash after {crash_at} more disk operations"));
        let retention_start = self.workload(&disk)?;
        if !disk.crashed() {
            disk.crash_now();
            self.note("workload done: crash now".to_owned());
        }
        totals.crash_points += 1;
        let durable = durable_batches(&disk)?;
        let images = [
            (Restart::TornPowerLoss, disk.power_loss(&mut self.rng)),
            (Restart::PowerLoss, disk.power_loss_durable()),
            (Restart::ProcessCrash, disk.process_crash()),
        ];
        let carry_on = self.rng.below(3) as usize;
        // Copied before the check appends to it: the next epoch recovers this image.
        let next = images[carry_on].1.process_crash();
        let mut carried = None;
        for (i, (how, image)) in images.iter().enumerate() {
            self.restart = Some(image.clone());
            let survey = self
                .check(*how, image, &durable, retention_start)
                .map_err(|e| format!("after a {how:?} (epoch {}): {e}", self.epoch))?;
            totals.restarts += 1;
            if i == carry_on {
                carried = Some((*how, survey));
            }
        }
        let (how, survey) = carried.expect("one image carries on");
        self.note(format!(
            "carry on from the {how:?}: offsets {}..{}",
            survey.start, survey.end
        ));
        let present: HashMap<u64, u64> = survey.batches.iter().map(|f| (f.tag, f.base)).collect();
        // Acknowledged batches a power loss took (allowed unless `always`), or that
        // retention deleted, are no longer expected.
        self.acked.retain(|tag, _| present.contains_key(tag));
        self.log_start = survey.start;
        self.offset_high = self.offset_high.max(survey.end);
        Ok(next)
    }

    /// Runs workload steps until the disk dies or the steps run out. Returns the log
    /// start the last live log had (offsets below it may be gone by retention).
    fn workload(&mut self, disk: &SimIo) -> Result<u64, String> {
        let mut retention_start = self.log_start;
        let mut log = match self.open(disk) {
            Ok(log) => Arc::new(log),
            Err(e) if disk.crashed() => {
                self.note(format!("open failed after the crash: {e}"));
                return Ok(retention_start);
            }
            Err(e) => return Err(format!("open failed: {e}")),
        };
        if log.failure().is_some() {
            // Damage a crash left under `never`/`interval` (checked when it was found):
            // accept it, as an operator would, so appends resume.
            match log.accept_damage(self.offset_high) {
                Ok(ranges) => self.note(format!("accepted damage {ranges:?}")),
                Err(e) if disk.crashed() => {
                    self.note(format!("accept_damage failed after the crash: {e}"));
                    return Ok(retention_start);
                }
                Err(e) => return Err(format!("accept_damage failed: {e}")),
            }
        }
        let mut expected_next = log.next_offset();
        for step in 0..STEPS_MAX {
            if disk.crashed() {
                break;
            }
            let roll = self.rng.below(100);
            match roll {
                0..55 if self.threads == 1 => {
                    let batch = self.new_batch();
                    let result = log.append(&batch.bytes);
                    let line = format!(
                        "s{step} append T{} ({} records, {} B)",
                        batch.tag,
                        batch.values.len(),
                        batch.bytes.len()
                    );
                    match result {
                        Ok(a) => {
                            self.note(format!("{line} -> {}..={}", a.base_offset, a.last_offset));
                            ensure(a.base_offset == expected_next, || {
                                format!(
                                    "T{} acknowledged at {}, expected {expected_next}",
                                    batch.tag, a.base_offset
                                )
                            })?;
                            expected_next = a.last_offset + 1;
                            self.ack(batch.tag, a.base_offset, a.last_offset);
                        }
                        Err(e) => {
                            self.note(format!("{line} -> {e}"));
                            ensure(disk.crashed(), || format!("append failed: {e}"))?;
                        }
                    }
                }
                0..55 => self.burst(&log, disk, step)?,
                55..63 => {
                    self.note(format!("s{step} close and reopen"));
                    let (start, next) = (log.log_start(), log.next_offset());
                    if let Err(e) = log.close() {
                        ensure(disk.crashed(), || format!("close failed: {e}"))?;
                        break;
                    }
                    drop(log);
                    log = match self.open(disk) {
                        Ok(l) => Arc::new(l),
                        Err(e) => {
                            ensure(disk.crashed(), || format!("reopen failed: {e}"))?;
                            self.note(format!("reopen failed after the crash: {e}"));
                            return Ok(retention_start);
                        }
                    };
                    ensure(
                        (log.log_start(), log.next_offset()) == (start, next),
                        || {
                            format!(
                                "a clean reopen changed the log: {start}..{next} became {}..{}",
                                log.log_start(),
                                log.next_offset()
                            )
                        },
                    )?;
                }
                63..75 => {
                    let outcome = log.apply_retention();
                    retention_start = retention_start.max(log.log_start());
                    self.note(format!("s{step} retention -> {outcome:?}"));
                    if let Err(e) = outcome {
                        ensure(disk.crashed(), || format!("retention failed: {e}"))?;
                    }
                }
                75..85 => {
                    let us = self.rng.between(1, 2_000_000) as i64;
                    self.clock.advance_us(us);
                    self.note(format!("s{step} clock +{us} µs"));
                }
                85..93 => {
                    // Drop-behind both with memory short and ample (from the step
                    // number, so the random stream of recorded seeds is unchanged).
                    let memory = if step % 2 == 0 {
                        Memory::Short
                    } else {
                        Memory::Ample
                    };
                    log.write_behind(memory);
                    let synced = log.sync_if_due();
                    self.note(format!("s{step} interval tick ({memory:?}) -> {synced:?}"));
                    if let Err(e) = synced {
                        ensure(disk.crashed(), || format!("sync_if_due failed: {e}"))?;
                    }
                }
                93..96 => {
                    let synced = log.sync();
                    self.note(format!("s{step} sync -> {synced:?}"));
                    if let Err(e) = synced {
                        ensure(disk.crashed(), || format!("sync failed: {e}"))?;
                    }
                }
                96..98 => {
                    let to = self.rng.between(log.log_start(), log.next_offset());
                    // In flight, it may take effect whatever it answers: the records
                    // below it are no longer expected.
                    retention_start = retention_start.max(to);
                    let purged = log.purge_before(to);
                    self.note(format!("s{step} purge below {to} -> {purged:?}"));
                    match purged {
                        Ok(start) => {
                            ensure(start >= to && log.log_start() == start, || {
                                format!("a purge below {to} left the log starting at {start}")
                            })?;
                            self.purged = self.purged.max(to);
                        }
                        Err(e) => ensure(disk.crashed(), || format!("purge failed: {e}"))?,
                    }
                }
                _ => self.read_one(&log, disk, step)?,
            }
        }
        if disk.crashed() {
            // The process is dead: nothing may be acknowledged any more.
            let batch = self.new_batch();
            let result = log.append(&batch.bytes);
            self.note(format!(
                "append T{} after the crash -> {result:?}",
                batch.tag
            ));
            ensure(result.is_err(), || {
                format!("T{} was acknowledged after the disk died", batch.tag)
            })?;
        }
        retention_start = retention_start.max(log.log_start());
        Ok(retention_start)
    }

    fn ack(&mut self, tag: u64, base: u64, last: u64) {
        self.acked.insert(tag, base);
        self.offset_high = self.offset_high.max(last + 1);
    }

    /// Several threads append at once (group commit, rolls racing appends).
    fn burst(&mut self, log: &Arc<PartitionLog>, disk: &SimIo, step: u64) -> Result<(), String> {
        let per_thread: Vec<Vec<Arc<Batch>>> = (0..self.threads)
            .map(|_| {
                let n = self.rng.between(1, 3);
                (0..n).map(|_| self.new_batch()).collect()
            })
            .collect();
        let handles: Vec<_> = per_thread
            .into_iter()
            .map(|batches| {
                let log = Arc::clone(log);
                std::thread::spawn(move || {
                    batches
                        .into_iter()
                        .map(|b| {
                            let r = log.append(&b.bytes);
                            (b.tag, r)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut lines = Vec::new();
        for h in handles {
            for (tag, result) in h.join().map_err(|_| "an appending thread panicked")? {
                match result {
                    Ok(a) => {
                        lines.push(format!("T{tag} -> {}..={}", a.base_offset, a.last_offset));
                        self.ack(tag, a.base_offset, a.last_offset);
                    }
                    Err(e) => {
                        lines.push(format!("T{tag} -> {e}"));
                        ensure(disk.crashed(), || format!("append T{tag} failed: {e}"))?;
                    }
                }
            }
        }
        self.note(format!("s{step} burst: {}", lines.join(", ")));
        Ok(())
    }

    /// Reads one acknowledged batch back while the log runs.
    fn read_one(&mut self, log: &PartitionLog, disk: &SimIo, step: u64) -> Result<(), String> {
        let candidates: Vec<(u64, u64)> = self
            .acked
            .iter()
            .map(|(t, b)| (*t, *b))
            .filter(|(_, b)| *b >= log.log_start())
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let (tag, base) = *self.rng.pick(&candidates);
        let read = log.read(base, 1);
        self.note(format!("s{step} read T{tag} at {base}"));
        match read {
            Ok(read) => {
                let batch = read
                    .batches()
                    .next()
                    .ok_or_else(|| format!("read at {base} returned nothing"))?
                    .map_err(|e| format!("read at {base}: {e}"))?;
                let found = self.identify(&batch)?;
                ensure(found.base == base && found.tag == tag, || {
                    format!("read at {base} returned {found:?}, expected T{tag}")
                })
            }
            // A retention pass may have raced; only a dead disk explains other errors.
            Err(StorageError::OffsetBeforeStart { .. }) => Ok(()),
            Err(e) => ensure(disk.crashed(), || format!("read at {base}: {e}")),
        }
    }
}
