//! The machine and software a comparison ran on, and the date it ran.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

/// The machine and software a comparison ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Machine {
    /// `uname -a`.
    pub(crate) uname: String,
    /// The CPU model from `/proc/cpuinfo`.
    pub(crate) cpu: String,
    /// Logical cores available.
    pub(crate) cores: usize,
    /// Total memory from `/proc/meminfo`.
    pub(crate) memory: String,
    /// When the report was made, UTC, RFC 3339.
    pub(crate) date: String,
    /// `--version` of each binary (`rill`, `redis-server`, `nats-server`) and the Rill
    /// commit when in a git checkout.
    pub(crate) versions: BTreeMap<String, String>,
}

impl Machine {
    /// Looks at this machine; `programs` are the binaries whose versions to record.
    pub(crate) fn probe(programs: &[(&str, &Path)]) -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(format!("{:.1} GiB", kib / 1024.0 / 1024.0))
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let mut versions = BTreeMap::new();
        for (name, path) in programs {
            let version = command_line(path, &["--version"])
                .unwrap_or_else(|| format!("unknown ({} --version failed)", path.display()));
            versions.insert((*name).to_owned(), version);
        }
        if let Some(commit) = command_line(Path::new("git"), &["describe", "--always", "--dirty"]) {
            versions.insert("rill commit".to_owned(), commit);
        }
        Self {
            uname: command_line(Path::new("uname"), &["-a"]).unwrap_or_else(|| "unknown".into()),
            cpu,
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            memory,
            date: rfc3339(std::time::SystemTime::now()),
            versions,
        }
    }
}

/// The first line a successful command prints, if any.
fn command_line(program: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

/// A time as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub(super) fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(
            rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }
}
