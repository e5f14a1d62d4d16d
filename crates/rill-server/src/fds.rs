//! File descriptors: how many connections the process's descriptor limit allows, and
//! the spare descriptor that lets an `accept` that ran out of them still answer.
//!
//! Every client connection costs one descriptor. If the connection limit were larger
//! than what the descriptor limit leaves, the server would reach `EMFILE` before
//! `max_connections`: `accept` would fail and the client would wait in the backlog with
//! no answer, and the admin endpoint would stop answering too. So the server derives its
//! effective limit from the descriptors left at start (Linux, where they can be
//! counted), and keeps a spare descriptor for the case the estimate misses (the broker
//! opened more files than reserved): on `EMFILE` it closes the spare, accepts, answers,
//! and opens the spare again.

use std::fs::File;

use crate::ServerError;

/// Descriptors kept back beyond the admin connections and `files_reserved`: the socket
/// of a connection over the limit, accepted only to be refused; the spares reopened;
/// and what the runtime opens after the count (signal and DNS machinery).
pub(crate) const FDS_SLACK: usize = 8;

/// The descriptor limit and the descriptors open, when both can be known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FdUsage {
    /// The soft `RLIMIT_NOFILE`.
    pub(crate) limit: u64,
    pub(crate) open: usize,
}

/// The process's descriptor usage: `None` where it cannot be counted (not Linux).
pub(crate) fn usage() -> Option<FdUsage> {
    #[cfg(target_os = "linux")]
    {
        let (limit, _hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)
            .inspect_err(|e| tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE"))
            .ok()?;
        // The directory handle being read is among the entries: one too many, which
        // errs on the safe side.
        let open = std::fs::read_dir("/proc/self/fd")
            .inspect_err(|e| tracing::warn!(error = %e, "cannot count open descriptors"))
            .ok()?
            .count();
        Some(FdUsage { limit, open })
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The connection limit in force: `configured`, lowered to what the descriptors left
/// allow once `reserved` are kept back. Fails when that is not even one.
pub(crate) fn connection_limit(
    configured: usize,
    usage: Option<FdUsage>,
    reserved: usize,
) -> Result<usize, ServerError> {
    let Some(usage) = usage else {
        return Ok(configured);
    };
    let room = usage
        .limit
        .saturating_sub(usage.open as u64)
        .saturating_sub(reserved as u64);
    if room == 0 {
        return Err(ServerError::TooFewFiles {
            limit: usage.limit,
            open: usage.open,
            reserved,
        });
    }
    Ok(usize::try_from(room).map_or(configured, |room| room.min(configured)))
}

/// Whether an `accept` failed for want of a descriptor (per process or system-wide).
pub(crate) fn out_of_fds(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// A descriptor held only to be given up when the process runs out of them.
#[derive(Debug)]
pub(crate) struct Spare(Option<File>);

impl Spare {
    pub(crate) fn open() -> Self {
        let mut spare = Spare(None);
        spare.restore();
        spare
    }

    /// Closes the spare; false if it was already closed.
    pub(crate) fn release(&mut self) -> bool {
        self.0.take().is_some()
    }

    /// Whether the spare is closed (given up, or it could not be reopened).
    pub(crate) fn is_released(&self) -> bool {
        self.0.is_none()
    }

    /// Reopens the spare if it is closed; it stays closed while no descriptor is free.
    pub(crate) fn restore(&mut self) {
        if self.0.is_none() {
            self.0 = File::open(NULL_DEVICE).ok();
        }
    }
}

#[cfg(unix)]
const NULL_DEVICE: &str = "/dev/null";
#[cfg(not(unix))]
const NULL_DEVICE: &str = "NUL";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_what_the_descriptors_leave() {
        let usage = |limit, open| Some(FdUsage { limit, open });
        assert_eq!(connection_limit(1024, None, 500).unwrap(), 1024);
        assert_eq!(
            connection_limit(1024, usage(100_000, 20), 300).unwrap(),
            1024
        );
        assert_eq!(connection_limit(1024, usage(1024, 20), 300).unwrap(), 704);
        assert_eq!(
            connection_limit(1024, usage(u64::MAX, 20), 300).unwrap(),
            1024
        );
        assert_eq!(connection_limit(10, usage(321, 20), 300).unwrap(), 1);
        for (limit, open) in [(320, 20), (128, 20), (10, 20)] {
            match connection_limit(10, usage(limit, open), 300) {
                Err(ServerError::TooFewFiles {
                    limit: l,
                    open: o,
                    reserved: 300,
                }) => assert_eq!((l, o), (limit, open)),
                other => panic!("{limit}: {other:?}"),
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn usage_counts_descriptors_and_the_spare_is_one() {
        let before = usage().unwrap();
        assert!(before.limit > 0 && before.open >= 3, "{before:?}");
        let mut spare = Spare::open();
        assert!(!spare.is_released());
        // Tests run in parallel threads, so only the spare's own effect is certain
        // within a margin; the descriptor count is checked loosely.
        assert!(usage().unwrap().open >= 1);
        assert!(spare.release());
        assert!(!spare.release());
        assert!(spare.is_released());
        spare.restore();
        assert!(!spare.is_released());
    }

    #[test]
    fn emfile_and_enfile_are_out_of_fds() {
        #[cfg(unix)]
        {
            assert!(out_of_fds(&std::io::Error::from_raw_os_error(libc::EMFILE)));
            assert!(out_of_fds(&std::io::Error::from_raw_os_error(libc::ENFILE)));
        }
        assert!(!out_of_fds(&std::io::Error::from(
            std::io::ErrorKind::ConnectionAborted
        )));
    }
}
