//! Loopback ports for servers that tests start on ports chosen in advance: a cluster's
//! nodes name each other's peer ports before any of them runs, and a restarted server
//! must come back on the port its clients know.
//!
//! The usual way, binding port 0 and closing the probe, hands out a port that was free
//! a moment ago, and two things take such a port before the server binds it:
//!
//! - another probe: the kernel may pick the same port again for the next `bind(0)` in
//!   this process or in another test process (measured here: 4 of 3,000 sets of six
//!   probes held a repeat);
//! - an outgoing connection of any process, whose source port comes from the same
//!   ephemeral range.
//!
//! So the ports here come from below the kernel's ephemeral range, where neither a
//! `bind(0)` nor a connection's source port lands, and each is reserved for the life of
//! the process by an advisory lock on a file of its own in the temporary directory: no
//! two processes that use this module (nextest runs each test in its own; the soak and
//! nemesis tools) hand out the same port while both run. A port is handed out only when
//! a bind of it succeeds, so one that something else holds is skipped. The locks go with
//! the process, so nothing is left to clean up after a crash.

use std::fs::{File, TryLockError};
use std::io;
use std::net::TcpListener;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use parking_lot::Mutex;

/// The lock files this process holds: its reserved ports, kept until it exits.
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// The lowest port handed out (above the usual fixed ports of local services).
const LOWEST: u16 = 10_000;

/// The fewest ports below (or above) the ephemeral range worth choosing from.
const ENOUGH: u32 = 2_000;

/// A port of 127.0.0.1 that no other caller of this module holds, that was free when
/// chosen, and that neither `bind(0)` nor an outgoing connection takes meanwhile.
pub fn free_port() -> io::Result<u16> {
    Ok(free_ports(1)?[0])
}

/// `n` distinct ports as [`free_port`] chooses them.
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let Some(range) = outside_ephemeral(ephemeral_range()) else {
        return probed(n);
    };
    let dir = std::env::temp_dir().join("rill-test-ports");
    std::fs::create_dir_all(&dir)?;
    let (low, high) = (u32::from(*range.start()), u32::from(*range.end()));
    let span = high - low + 1;
    let start = rand::random::<u32>() % span;
    let mut chosen = Vec::with_capacity(n);
    for step in 0..span {
        if chosen.len() == n {
            break;
        }
        let port = u16::try_from(low + (start + step) % span).expect("a port fits u16");
        if let Some(lock) = reserve(&dir, port)? {
            HELD.lock().push(lock);
            chosen.push(port);
        }
    }
    if chosen.len() < n {
        return Err(io::Error::other(format!(
            "fewer than {n} free ports in {}..={}",
            range.start(),
            range.end()
        )));
    }
    Ok(chosen)
}

/// The lock of `port` if no one else holds it and the port binds now.
fn reserve(dir: &std::path::Path, port: u16) -> io::Result<Option<File>> {
    let path: PathBuf = dir.join(format!("{port}.lock"));
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(None),
        Err(TryLockError::Error(e)) => return Err(e),
    }
    // Locked by us (a lock is per open file, so this process's own earlier ports are
    // refused above too); the port itself must also be free of anything else.
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(_probe) => Ok(Some(file)),
        Err(_) => Ok(None),
    }
}

/// The kernel's ephemeral port range (Linux's default when it cannot be read).
fn ephemeral_range() -> RangeInclusive<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(str::parse::<u16>);
            match (parts.next(), parts.next()) {
                (Some(Ok(low)), Some(Ok(high))) if low <= high => Some(low..=high),
                _ => None,
            }
        })
        .unwrap_or(32_768..=60_999)
}

/// Ports below the ephemeral range, else above it, if either side holds enough.
fn outside_ephemeral(ephemeral: RangeInclusive<u16>) -> Option<RangeInclusive<u16>> {
    let (low, high) = (*ephemeral.start(), *ephemeral.end());
    if u32::from(low).saturating_sub(u32::from(LOWEST)) >= ENOUGH {
        Some(LOWEST..=low - 1)
    } else if u32::from(u16::MAX - high) >= ENOUGH {
        Some(high + 1..=u16::MAX)
    } else {
        None
    }
}

/// The fallback where the ephemeral range covers nearly every port: `n` ports from
/// probes held open together, so at least this call's ports are distinct.
fn probed(n: usize) -> io::Result<Vec<u16>> {
    let probes = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    probes
        .iter()
        .map(|p| p.local_addr().map(|a| a.port()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_outside_the_ephemeral_range_and_bindable() {
        let ports = free_ports(50).unwrap();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), 50);
        let ephemeral = ephemeral_range();
        for &p in &ports {
            assert!(!ephemeral.contains(&p), "{p} is in {ephemeral:?}");
            TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
        // Later calls never repeat a port this process holds.
        let more = free_ports(50).unwrap();
        assert!(more.iter().all(|p| !distinct.contains(p)));
    }

    #[test]
    fn a_port_locked_elsewhere_or_bound_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        assert!(reserve(dir.path(), port).unwrap().is_none(), "a bound port");
        drop(taken);
        let first = reserve(dir.path(), port)
            .unwrap()
            .expect("free and unlocked");
        assert!(
            reserve(dir.path(), port).unwrap().is_none(),
            "a locked port"
        );
        drop(first);
        assert!(
            reserve(dir.path(), port).unwrap().is_some(),
            "unlocked again"
        );
    }

    #[test]
    fn the_range_is_below_the_ephemeral_one_else_above_it() {
        assert_eq!(outside_ephemeral(32_768..=60_999), Some(10_000..=32_767));
        assert_eq!(outside_ephemeral(1_024..=60_000), Some(60_001..=65_535));
        assert_eq!(outside_ephemeral(1_024..=65_000), None);
    }
}
