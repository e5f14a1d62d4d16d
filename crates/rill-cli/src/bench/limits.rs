//! `rill bench limits`, and `--limits` before a workload: what this machine allows,
//! measured in the same run as the workloads it is compared with (docs/CLI.md, "Bench").
//!
//! Six figures, each a short loop after a short uncounted warm-up:
//!
//! - **loopback**: TCP over 127.0.0.1 between two threads of this process, 1 MiB writes
//!   and 1 MiB reads (what a client and a server on this host could move at best; no
//!   iperf needed);
//! - **loopback_rtt**: one byte sent back and forth over such a connection, the median
//!   round trip (what every request waited for in turn pays at least: two wake-ups of a
//!   sleeping thread, which on a virtual machine may cost the hypervisor's time too);
//! - **disk_sync**: the log's `always` pattern on the disk of a directory (the data
//!   directory's, when known): append one batch's bytes to a new file, `fdatasync`,
//!   repeat;
//! - **disk_direct**: sequential 1 MiB `O_DIRECT` writes to a new file of that directory,
//!   then one `fdatasync` (the disk's own bandwidth, without the page cache; `None`
//!   where the file system refuses `O_DIRECT`, as tmpfs does);
//! - **page_cache**: buffered 1 MiB writes into new files of that directory, each file
//!   removed at 256 MiB, before the kernel writes it back (what an append that waits for
//!   no sync costs at least: the kernel's copy into page-cache pages it allocates; the
//!   loop reuses the pages it frees at once, so on a virtual machine that gives freed
//!   memory back to its host, a log writing into memory given back pays more, see
//!   [`Host`]);
//! - **memcpy**: copying a 64 MiB buffer into another (the ceiling of any path that
//!   copies each byte once, such as the embedded mode's).
//!
//! The temporary files are removed afterwards, also when a step fails.
//!
//! Besides the figures, two facts of a virtual machine's host that move them, read from
//! `/sys` ([`Host`]): whether freed memory goes back to the hypervisor (free page
//! reporting), and whether an idle vCPU halts at once (guest halt polling off).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

/// Bytes per write and read of the loopback and direct-write loops.
const CHUNK: usize = 1 << 20;
/// Uncounted time before each measured loop.
const WARM_UP: Duration = Duration::from_millis(300);
/// Bytes the disk loops write at most (they stop at their time or at this, first).
const DISK_BYTES_MAX: u64 = 2 << 30;
/// Round trips the loopback round-trip loop makes at most (it stops at its time or at
/// this, first), so its samples stay a bounded buffer.
const RTT_SAMPLES_MAX: usize = 200_000;
/// Bytes the page-cache loop writes into one file before it removes it: far below the
/// kernel's background writeback threshold on any machine worth benchmarking, so the
/// loop measures the copy into the page cache and not the disk.
const PAGE_CACHE_FILE_BYTES: u64 = 256 << 20;
/// The memory copy's buffers.
const MEMCPY_BYTES: usize = 64 << 20;
/// `O_DIRECT` wants buffers, offsets and lengths aligned to the logical block size;
/// 4 KiB covers every common disk.
const ALIGN: usize = 4096;

/// What was measured, in MB/s (10⁶ bytes per second, as the workloads report).
#[derive(Debug, Clone)]
pub(super) struct Limits {
    pub(super) loopback_mb_per_s: f64,
    /// Median round trip of one byte, µs.
    pub(super) loopback_rtt_us: f64,
    pub(super) disk_sync_mb_per_s: f64,
    pub(super) disk_syncs_per_s: f64,
    /// Bytes per write of the sync loop (one batch).
    pub(super) disk_sync_write_bytes: usize,
    pub(super) disk_direct_mb_per_s: Option<f64>,
    pub(super) page_cache_mb_per_s: f64,
    pub(super) memcpy_mb_per_s: f64,
    /// The directory whose disk was measured.
    pub(super) dir: PathBuf,
    pub(super) host: Host,
}

/// What a virtual machine's host does that moves these figures, as Linux's `/sys` tells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Host {
    /// A virtio balloon device that reports free pages (`VIRTIO_BALLOON_F_REPORTING`):
    /// memory the guest frees goes back to the hypervisor, and the first touch of it
    /// afterwards faults through the host. On the machine of docs/BENCHMARKS.md that ran
    /// at about 500 MB/s: runs right after much memory was freed are slower.
    pub(super) free_page_reporting: bool,
    /// The `haltpoll` idle driver's `guest_halt_poll_ns`, when it is the driver in use:
    /// 0 means an idle vCPU halts at once, and waking a sleeping thread goes through
    /// the hypervisor (the round trip shows what that costs).
    pub(super) guest_halt_poll_ns: Option<u64>,
}

/// The virtio device id of a memory balloon.
const VIRTIO_BALLOON: &str = "0x0005";
/// The balloon's feature bit for free page reporting (virtio spec 5.5.3).
const VIRTIO_BALLOON_F_REPORTING: usize = 5;

impl Host {
    /// Reads the facts under `sys` (`/sys`); what cannot be read is left unset.
    pub(super) fn read(sys: &Path) -> Self {
        let text = |path: PathBuf| std::fs::read_to_string(path).ok();
        let free_page_reporting = std::fs::read_dir(sys.join("bus/virtio/devices"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|device| device.path())
            .any(|device| {
                // A bound driver negotiated the features the file shows, one character
                // per bit from bit 0.
                text(device.join("device")).is_some_and(|id| id.trim() == VIRTIO_BALLOON)
                    && device.join("driver").exists()
                    && text(device.join("features")).is_some_and(|features| {
                        features.as_bytes().get(VIRTIO_BALLOON_F_REPORTING) == Some(&b'1')
                    })
            });
        let haltpoll = text(sys.join("devices/system/cpu/cpuidle/current_driver"))
            .is_some_and(|driver| driver.trim() == "haltpoll");
        let guest_halt_poll_ns = haltpoll
            .then(|| text(sys.join("module/haltpoll/parameters/guest_halt_poll_ns")))
            .flatten()
            .and_then(|ns| ns.trim().parse().ok());
        Self {
            free_page_reporting,
            guest_halt_poll_ns,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "free_page_reporting": self.free_page_reporting,
            "guest_halt_poll_ns": self.guest_halt_poll_ns,
        })
    }

    /// The human lines: only what moves the figures.
    fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.free_page_reporting {
            lines.push(
                "  host: free page reporting on (memory this machine frees goes back to the \
                 hypervisor; writing into it again is slower, so runs right after much memory \
                 was freed are slower)"
                    .to_owned(),
            );
        }
        if self.guest_halt_poll_ns == Some(0) {
            lines.push(
                "  host: guest halt polling off (an idle vCPU halts at once; waking a sleeping \
                 thread goes through the hypervisor, which the round trip includes)"
                    .to_owned(),
            );
        }
        lines
    }
}

/// Which limit bounds a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bound {
    Loopback,
    DiskSync,
    Memcpy,
}

impl Bound {
    fn name(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::DiskSync => "disk_sync",
            Self::Memcpy => "memcpy",
        }
    }
}

impl Limits {
    /// Measures every limit, `seconds` per loop (about `5 × seconds + 3 s` in all).
    /// `sync_write_bytes` is one batch's size, the sync loop's write.
    pub(super) async fn measure(
        dir: &Path,
        sync_write_bytes: usize,
        seconds: f64,
    ) -> anyhow::Result<Self> {
        let period = Duration::from_secs_f64(seconds);
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let loopback = loopback(period).context("measuring loopback TCP")?;
            let rtt = loopback_rtt(period).context("measuring loopback round trips")?;
            let (sync, syncs) = disk_sync(&dir, sync_write_bytes.max(1), period)
                .with_context(|| format!("measuring write+fdatasync in {}", dir.display()))?;
            let direct = disk_direct(&dir, period)
                .with_context(|| format!("measuring O_DIRECT writes in {}", dir.display()))?;
            let page_cache = page_cache(&dir, period)
                .with_context(|| format!("measuring page-cache writes in {}", dir.display()))?;
            let memcpy = memcpy(period.min(Duration::from_secs(1)));
            Ok(Self {
                loopback_mb_per_s: loopback,
                loopback_rtt_us: rtt,
                disk_sync_mb_per_s: sync,
                disk_syncs_per_s: syncs,
                disk_sync_write_bytes: sync_write_bytes.max(1),
                disk_direct_mb_per_s: direct,
                page_cache_mb_per_s: page_cache,
                memcpy_mb_per_s: memcpy,
                dir,
                host: Host::read(Path::new("/sys")),
            })
        })
        .await
        .context("the limits task failed")?
    }

    fn get(&self, bound: Bound) -> f64 {
        match bound {
            Bound::Loopback => self.loopback_mb_per_s,
            Bound::DiskSync => self.disk_sync_mb_per_s,
            Bound::Memcpy => self.memcpy_mb_per_s,
        }
    }

    pub(super) fn to_json(&self) -> Value {
        json!({
            "loopback_mb_per_s": round1(self.loopback_mb_per_s),
            "loopback_rtt_us": round1(self.loopback_rtt_us),
            "disk_sync_mb_per_s": round1(self.disk_sync_mb_per_s),
            "disk_syncs_per_s": round1(self.disk_syncs_per_s),
            "disk_sync_write_bytes": self.disk_sync_write_bytes,
            "disk_direct_mb_per_s": self.disk_direct_mb_per_s.map(round1),
            "page_cache_mb_per_s": round1(self.page_cache_mb_per_s),
            "memcpy_mb_per_s": round1(self.memcpy_mb_per_s),
            "dir": self.dir.display().to_string(),
            "host": self.host.to_json(),
        })
    }

    /// A workload's MB/s as a fraction of every limit, and the one that bounds it.
    pub(super) fn fractions(&self, mb_per_s: f64, bound: Bound) -> Value {
        let f = |limit: f64| {
            if limit > 0.0 {
                json!(round3(mb_per_s / limit))
            } else {
                Value::Null
            }
        };
        json!({
            "bound": bound.name(),
            "of_bound": f(self.get(bound)),
            "loopback": f(self.loopback_mb_per_s),
            "disk_sync": f(self.disk_sync_mb_per_s),
            "disk_direct": self.disk_direct_mb_per_s.map_or(Value::Null, f),
            "page_cache": f(self.page_cache_mb_per_s),
            "memcpy": f(self.memcpy_mb_per_s),
        })
    }

    /// The human lines.
    pub(super) fn lines(&self) -> Vec<String> {
        vec![
            format!(
                "  loopback TCP (1 MiB writes): {:.0} MB/s",
                self.loopback_mb_per_s
            ),
            format!(
                "  loopback TCP round trip (1 byte): {:.1} µs median",
                self.loopback_rtt_us
            ),
            format!(
                "  write+fdatasync ({} B per write) in {}: {:.0} MB/s, {:.0} syncs/s",
                self.disk_sync_write_bytes,
                self.dir.display(),
                self.disk_sync_mb_per_s,
                self.disk_syncs_per_s
            ),
            match self.disk_direct_mb_per_s {
                Some(d) => format!("  O_DIRECT writes (1 MiB): {d:.0} MB/s"),
                None => "  O_DIRECT writes: not supported by this file system".to_owned(),
            },
            format!(
                "  page-cache writes (1 MiB, new files): {:.0} MB/s",
                self.page_cache_mb_per_s
            ),
            format!("  memory copy: {:.0} MB/s", self.memcpy_mb_per_s),
        ]
        .into_iter()
        .chain(self.host.lines())
        .collect()
    }
}

/// Prints `rill bench limits`' report.
pub(super) fn print(limits: &Limits, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        let mut v = limits.to_json();
        v["workload"] = json!("limits");
        serde_json::to_writer(&mut out, &v)?;
        writeln!(out)?;
    } else {
        writeln!(out, "bench limits:")?;
        for line in limits.lines() {
            writeln!(out, "{line}")?;
        }
    }
    out.flush().context("writing the report to stdout")
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6
}

/// Loopback TCP: a sender thread writes 1 MiB buffers as fast as it can, a receiver
/// thread reads them; MB/s received over `period`, after the warm-up.
fn loopback(period: Duration) -> anyhow::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let received = Arc::clone(&received);
        std::thread::spawn(move || -> std::io::Result<()> {
            let (mut socket, _) = listener.accept()?;
            let mut buf = vec![0u8; CHUNK];
            loop {
                match socket.read(&mut buf)? {
                    0 => return Ok(()),
                    n => {
                        received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
            }
        })
    };
    let sender = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> std::io::Result<()> {
            let mut socket = TcpStream::connect(addr)?;
            let buf = vec![0x5au8; CHUNK];
            while !stop.load(Ordering::Relaxed) {
                socket.write_all(&buf)?;
            }
            socket.shutdown(std::net::Shutdown::Write)
        })
    };
    std::thread::sleep(WARM_UP);
    let (t0, c0) = (Instant::now(), received.load(Ordering::Relaxed));
    std::thread::sleep(period);
    let (t1, c1) = (Instant::now(), received.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    let sent = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender panicked"))?;
    let read = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiver panicked"))?;
    sent.context("sending")?;
    read.context("receiving")?;
    Ok(mb_per_s(c1 - c0, t1 - t0))
}

/// Loopback TCP round trips: a thread sends one byte, another sends it back, again and
/// again; the median round trip in µs over `period` after the warm-up.
fn loopback_rtt(period: Duration) -> anyhow::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut socket, _) = listener.accept()?;
        socket.set_nodelay(true)?;
        let mut byte = [0u8; 1];
        loop {
            match socket.read(&mut byte)? {
                0 => return Ok(()),
                _ => socket.write_all(&byte)?,
            }
        }
    });
    let mut socket = TcpStream::connect(addr)?;
    socket.set_nodelay(true)?;
    let mut byte = [0x42u8; 1];
    let mut round_trip = |socket: &mut TcpStream| -> std::io::Result<Duration> {
        let start = Instant::now();
        socket.write_all(&byte)?;
        socket.read_exact(&mut byte)?;
        Ok(start.elapsed())
    };
    let warm = Instant::now();
    while warm.elapsed() < WARM_UP {
        round_trip(&mut socket)?;
    }
    let start = Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < period && samples.len() < RTT_SAMPLES_MAX {
        samples.push(round_trip(&mut socket)?);
    }
    socket.shutdown(std::net::Shutdown::Write)?;
    echo.join()
        .map_err(|_| anyhow::anyhow!("the echoing thread panicked"))?
        .context("echoing")?;
    samples.sort_unstable();
    let median = samples.get(samples.len() / 2).copied().unwrap_or_default();
    Ok(median.as_secs_f64() * 1e6)
}

/// A file of this process in `dir`, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(dir: &Path, what: &str) -> Self {
        Self(dir.join(format!(".rill-bench-limits-{what}-{}", std::process::id())))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Appends `write_bytes` and `fdatasync`s, again and again: MB/s and syncs/s over
/// `period` after the warm-up.
fn disk_sync(dir: &Path, write_bytes: usize, period: Duration) -> anyhow::Result<(f64, f64)> {
    let scratch = Scratch::new(dir, "sync");
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&scratch.0)?;
    let buf = vec![0xa5u8; write_bytes];
    let step = |file: &mut File| -> std::io::Result<()> {
        file.write_all(&buf)?;
        file.sync_data()
    };
    let warm = Instant::now();
    while warm.elapsed() < WARM_UP {
        step(&mut file)?;
    }
    let (start, mut bytes, mut syncs) = (Instant::now(), 0u64, 0u64);
    while start.elapsed() < period && bytes < DISK_BYTES_MAX {
        step(&mut file)?;
        bytes += write_bytes as u64;
        syncs += 1;
    }
    let elapsed = start.elapsed();
    Ok((
        mb_per_s(bytes, elapsed),
        syncs as f64 / elapsed.as_secs_f64().max(1e-9),
    ))
}

/// Sequential 1 MiB `O_DIRECT` writes and a final `fdatasync`: MB/s over `period` after
/// the warm-up, or `None` where the file system refuses `O_DIRECT`.
fn disk_direct(dir: &Path, period: Duration) -> anyhow::Result<Option<f64>> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let scratch = Scratch::new(dir, "direct");
        let mut file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&scratch.0)
        {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // An aligned 1 MiB window of a larger buffer.
        let mut backing = vec![0x3cu8; CHUNK + ALIGN];
        let skip = backing.as_ptr().align_offset(ALIGN);
        let buf = &mut backing[skip..skip + CHUNK];
        buf.fill(0x3c);
        let warm = Instant::now();
        while warm.elapsed() < WARM_UP {
            match file.write_all(buf) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        let (start, mut bytes) = (Instant::now(), 0u64);
        while start.elapsed() < period && bytes < DISK_BYTES_MAX {
            file.write_all(buf)?;
            bytes += CHUNK as u64;
        }
        file.sync_data()?;
        Ok(Some(mb_per_s(bytes, start.elapsed())))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (dir, period);
        Ok(None)
    }
}

/// Buffered 1 MiB writes into a new file, which is removed (its pages freed unwritten)
/// at [`PAGE_CACHE_FILE_BYTES`] and replaced by another: MB/s written over `period`
/// after the warm-up. The files' removal is not counted.
fn page_cache(dir: &Path, period: Duration) -> anyhow::Result<f64> {
    let buf = vec![0xc3u8; CHUNK];
    let mut file_no = 0u32;
    let mut fill = |until: Instant, bytes: &mut u64, spent: &mut Duration| -> anyhow::Result<()> {
        while Instant::now() < until && *bytes < DISK_BYTES_MAX * 4 {
            let scratch = Scratch::new(dir, &format!("page-cache-{file_no}"));
            file_no += 1;
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&scratch.0)?;
            let (start, mut written) = (Instant::now(), 0u64);
            while written < PAGE_CACHE_FILE_BYTES && Instant::now() < until {
                file.write_all(&buf)?;
                written += CHUNK as u64;
            }
            *spent += start.elapsed();
            *bytes += written;
            // Emptied before it is removed, so no writeback of it ever starts.
            file.set_len(0)?;
        }
        Ok(())
    };
    let (mut warm_bytes, mut warm_spent) = (0, Duration::ZERO);
    fill(Instant::now() + WARM_UP, &mut warm_bytes, &mut warm_spent)?;
    let (mut bytes, mut spent) = (0, Duration::ZERO);
    fill(Instant::now() + period, &mut bytes, &mut spent)?;
    Ok(mb_per_s(bytes, spent))
}

/// Copies a 64 MiB buffer into another, again and again: MB/s copied over `period`.
fn memcpy(period: Duration) -> f64 {
    let from = vec![0x77u8; MEMCPY_BYTES];
    let mut to = vec![0u8; MEMCPY_BYTES];
    to.copy_from_slice(&from); // touch every page first
    let (start, mut bytes) = (Instant::now(), 0u64);
    while start.elapsed() < period {
        to.copy_from_slice(std::hint::black_box(&from));
        std::hint::black_box(&mut to);
        bytes += MEMCPY_BYTES as u64;
    }
    mb_per_s(bytes, start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_limit_is_measured_and_the_scratch_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits::measure(dir.path(), 64 << 10, 0.05).await.unwrap();
        assert!(limits.loopback_mb_per_s > 0.0, "{limits:?}");
        assert!(limits.loopback_rtt_us > 0.0, "{limits:?}");
        assert!(limits.disk_sync_mb_per_s > 0.0, "{limits:?}");
        assert!(limits.disk_syncs_per_s > 0.0, "{limits:?}");
        assert!(limits.memcpy_mb_per_s > 0.0, "{limits:?}");
        assert!(limits.page_cache_mb_per_s > 0.0, "{limits:?}");
        if let Some(d) = limits.disk_direct_mb_per_s {
            assert!(d > 0.0, "{limits:?}");
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "scratch files left: {left:?}");
        let f = limits.fractions(limits.loopback_mb_per_s / 2.0, Bound::Loopback);
        assert_eq!(f["bound"], "loopback");
        assert_eq!(f["of_bound"], 0.5);
        assert_eq!(f["loopback"], 0.5);
        assert!(f["page_cache"].as_f64().unwrap() > 0.0, "{f}");
    }

    #[test]
    fn the_host_facts_come_from_sys() {
        let sys = tempfile::tempdir().unwrap();
        let device = |name: &str, id: &str, features: &str, bound: bool| {
            let dir = sys.path().join("bus/virtio/devices").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("device"), format!("{id}\n")).unwrap();
            std::fs::write(dir.join("features"), format!("{features}\n")).unwrap();
            if bound {
                std::fs::create_dir_all(dir.join("driver")).unwrap();
            }
        };
        // Nothing to read: no facts.
        assert_eq!(Host::read(sys.path()), Host::default());
        // A block device with bit 5 set, a balloon without it, an unbound balloon
        // with it: no reporting.
        device("virtio1", "0x0002", "0010011001100100", true);
        device("virtio2", "0x0005", "0110000000000000", true);
        device("virtio3", "0x0005", "0110010000000000", false);
        assert!(!Host::read(sys.path()).free_page_reporting);
        device("virtio0", "0x0005", "0110010100000000", true);
        assert!(Host::read(sys.path()).free_page_reporting);
        // Halt polling counts only where haltpoll is the idle driver.
        let cpuidle = sys.path().join("devices/system/cpu/cpuidle");
        let params = sys.path().join("module/haltpoll/parameters");
        std::fs::create_dir_all(&cpuidle).unwrap();
        std::fs::create_dir_all(&params).unwrap();
        std::fs::write(params.join("guest_halt_poll_ns"), "0\n").unwrap();
        std::fs::write(cpuidle.join("current_driver"), "intel_idle\n").unwrap();
        assert_eq!(Host::read(sys.path()).guest_halt_poll_ns, None);
        std::fs::write(cpuidle.join("current_driver"), "haltpoll\n").unwrap();
        let host = Host::read(sys.path());
        assert_eq!(host.guest_halt_poll_ns, Some(0));
        assert_eq!(host.lines().len(), 2, "{:?}", host.lines());
        assert_eq!(host.to_json()["guest_halt_poll_ns"], 0);
        std::fs::write(params.join("guest_halt_poll_ns"), "200000\n").unwrap();
        let host = Host::read(sys.path());
        assert_eq!(host.guest_halt_poll_ns, Some(200_000));
        assert_eq!(host.lines().len(), 1, "{:?}", host.lines());
    }

    #[test]
    fn a_missing_directory_is_an_error_that_names_it() {
        let e = disk_sync(
            Path::new("/nonexistent/rill"),
            4096,
            Duration::from_millis(1),
        )
        .unwrap_err();
        assert!(e.to_string().contains("No such file"), "{e:#}");
    }
}
