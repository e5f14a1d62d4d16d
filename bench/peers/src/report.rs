//! The comparison report: a text table, JSON, and an SVG chart.
//!
//! Per workload and system the report holds every run (result or error) and a
//! [`Summary`] over the successful ones: the median of records/s and MB/s with their
//! spread (min, max, and half the range as ± % of the median), and the median over runs
//! of each latency percentile. Per workload it holds Rill's [`Ratios`]: Rill's median
//! throughput divided by each peer's, and by the better peer's (the higher throughput),
//! and Rill's median p99 divided by the better peer's p99 (the lower p99). A throughput
//! ratio above 1 and a p99 ratio below 1 favour Rill.
//!
//! [`write()`] puts three files in the output directory: `latest.json` (everything,
//! including the machine), `latest.md` (the tables in Markdown) and `latest.svg` (the
//! charts); [`Report::text`] is the table printed to stdout.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::System;
use crate::measure::{LatencySummary, RunResult};
use crate::workload::{Durability, Kind, Workload};

/// One run of one workload on one system: its result, or why it failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Run {
    /// 1-based round.
    pub(crate) round: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<RunResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

impl Run {
    pub(crate) fn new(round: u32, outcome: Result<RunResult, String>) -> Self {
        match outcome {
            Ok(r) => Self {
                round,
                result: Some(r),
                error: None,
            },
            Err(e) => Self {
                round,
                result: None,
                error: Some(e),
            },
        }
    }
}

/// Whether a system ran a workload, and how that went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Status {
    /// Every run succeeded.
    #[serde(rename = "ok")]
    Ok,
    /// Some runs failed; the summary is over the others.
    #[serde(rename = "partial")]
    Partial,
    /// Every run failed.
    #[serde(rename = "failed")]
    Failed,
    /// Not run: the system has no setting for the workload's durability class.
    #[serde(rename = "n/a")]
    NotApplicable,
}

/// The median of a measure over runs and how far the runs spread around it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// Half of `max - min`, as a percentage of the median (printed as ± %).
    pub(crate) pct: f64,
}

/// A system's figures for one workload, over its successful runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Summary {
    /// Successful runs summarised.
    pub(crate) runs: usize,
    pub(crate) records_per_s: Spread,
    pub(crate) mb_per_s: Spread,
    /// The median over runs of each percentile, in µs.
    pub(crate) latency_us: LatencySummary,
}

/// One system on one workload.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SystemReport {
    pub(crate) system: System,
    /// The durability setting it ran with (`None`: it has none for this class).
    pub(crate) setting: Option<String>,
    pub(crate) status: Status,
    /// Why it did not run, or the first error of its failed runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) summary: Option<Summary>,
    pub(crate) runs: Vec<Run>,
}

impl SystemReport {
    /// The report of a system that has no setting for `durability`.
    pub(crate) fn not_applicable(system: System, durability: Durability) -> Self {
        Self {
            system,
            setting: None,
            status: Status::NotApplicable,
            reason: Some(not_applicable_reason(system, durability)),
            summary: None,
            runs: Vec::new(),
        }
    }

    /// The report of a system that ran with `setting`.
    pub(crate) fn ran(system: System, setting: String, runs: Vec<Run>) -> Self {
        let ok: Vec<&RunResult> = runs.iter().filter_map(|r| r.result.as_ref()).collect();
        let status = match (ok.len(), runs.len()) {
            (0, _) => Status::Failed,
            (n, m) if n == m => Status::Ok,
            _ => Status::Partial,
        };
        let reason = runs.iter().find_map(|r| r.error.clone());
        Self {
            system,
            setting: Some(setting),
            status,
            reason,
            summary: summarise(&ok),
            runs,
        }
    }
}

/// Why a system does not run a durability class.
fn not_applicable_reason(system: System, durability: Durability) -> String {
    match (system, durability) {
        (System::Nats, Durability::Fsync) => {
            "nats-server 2.9 has no fsync-before-acknowledgement setting".to_owned()
        }
        _ => format!(
            "{} has no setting for {} durability",
            system.name(),
            durability.name()
        ),
    }
}

/// Rill compared with its peers on one workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Ratios {
    /// Rill's median records/s divided by each peer's.
    pub(crate) throughput: BTreeMap<String, f64>,
    /// The peer with the higher median records/s.
    pub(crate) best_peer: Option<System>,
    /// Rill's median records/s divided by the best peer's.
    pub(crate) throughput_vs_best_peer: Option<f64>,
    /// The peer with the lower median p99.
    pub(crate) best_p99_peer: Option<System>,
    /// Rill's median p99 divided by the best p99 peer's (below 1: Rill's is lower).
    pub(crate) p99_vs_best_peer: Option<f64>,
}

/// Every system on one workload.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WorkloadReport {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) workload: Workload,
    pub(crate) systems: Vec<SystemReport>,
    pub(crate) ratios: Ratios,
}

impl WorkloadReport {
    pub(crate) fn new(workload: Workload, systems: Vec<SystemReport>) -> Self {
        Self {
            name: workload.name.clone(),
            description: workload.describe(),
            ratios: ratios(&systems),
            workload,
            systems,
        }
    }

    fn system(&self, system: System) -> Option<&SystemReport> {
        self.systems.iter().find(|s| s.system == system)
    }
}

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
pub(crate) fn rfc3339(t: std::time::SystemTime) -> String {
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

/// A whole comparison.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) machine: Machine,
    /// The workload set (`default` or `smoke`).
    pub(crate) set: String,
    pub(crate) rounds: u32,
    pub(crate) systems: Vec<System>,
    pub(crate) workloads: Vec<WorkloadReport>,
}

// ---------------------------------------------------------------------------------
// Statistics

/// The median of `values` (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        f64::midpoint(v[mid - 1], v[mid])
    } else {
        v[mid]
    })
}

/// Median, min, max and half-range as ± % of the median.
pub(crate) fn spread(values: &[f64]) -> Option<Spread> {
    let median = median(values)?;
    let finite = values.iter().copied().filter(|x| x.is_finite());
    let min = finite.clone().fold(f64::INFINITY, f64::min);
    let max = finite.fold(f64::NEG_INFINITY, f64::max);
    let pct = if median > 0.0 {
        (max - min) / 2.0 / median * 100.0
    } else {
        0.0
    };
    Some(Spread {
        median,
        min,
        max,
        pct,
    })
}

/// `a / b`, when both are positive and finite.
pub(crate) fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && a > 0.0 && b > 0.0).then(|| a / b)
}

fn summarise(runs: &[&RunResult]) -> Option<Summary> {
    let of = |f: fn(&RunResult) -> f64| runs.iter().map(|r| f(r)).collect::<Vec<f64>>();
    let med = |f: fn(&RunResult) -> f64| median(&of(f)).unwrap_or(0.0);
    Some(Summary {
        runs: runs.len(),
        records_per_s: spread(&of(|r| r.records_per_s))?,
        mb_per_s: spread(&of(|r| r.mb_per_s))?,
        latency_us: LatencySummary {
            p50: med(|r| r.latency_us.p50),
            p90: med(|r| r.latency_us.p90),
            p99: med(|r| r.latency_us.p99),
            p999: med(|r| r.latency_us.p999),
            max: med(|r| r.latency_us.max),
        },
    })
}

/// Rill's ratios to the peers that have a summary.
fn ratios(systems: &[SystemReport]) -> Ratios {
    let mut out = Ratios::default();
    let Some(rill) = systems
        .iter()
        .find(|s| s.system == System::Rill)
        .and_then(|s| s.summary)
    else {
        return out;
    };
    let peers: Vec<(System, Summary)> = systems
        .iter()
        .filter(|s| s.system != System::Rill)
        .filter_map(|s| Some((s.system, s.summary?)))
        .collect();
    for (peer, summary) in &peers {
        if let Some(r) = ratio(rill.records_per_s.median, summary.records_per_s.median) {
            out.throughput.insert(peer.name().to_owned(), r);
        }
    }
    if let Some((peer, best)) = peers.iter().max_by(|a, b| {
        a.1.records_per_s
            .median
            .total_cmp(&b.1.records_per_s.median)
    }) {
        out.best_peer = Some(*peer);
        out.throughput_vs_best_peer = ratio(rill.records_per_s.median, best.records_per_s.median);
    }
    if let Some((peer, best)) = peers
        .iter()
        .filter(|p| p.1.latency_us.p99 > 0.0)
        .min_by(|a, b| a.1.latency_us.p99.total_cmp(&b.1.latency_us.p99))
    {
        out.best_p99_peer = Some(*peer);
        out.p99_vs_best_peer = ratio(rill.latency_us.p99, best.latency_us.p99);
    }
    out
}

// ---------------------------------------------------------------------------------
// Formatting

/// A count with thousands separators: `1,234,567`.
pub(crate) fn thousands(x: f64) -> String {
    let n = x.round().max(0.0) as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate in few characters: `987`, `45.6k`, `1.23M`.
pub(crate) fn compact(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// MB/s with a decimal below 10: `0.4`, `12`.
fn mb(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// A latency in µs, in a readable unit: `850 µs`, `1.23 ms`, `2.35 s`.
pub(crate) fn latency(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

/// An axis label for a round latency: `1 µs`, `20 µs`, `5 ms`, `1 s`.
fn round_latency(us: f64) -> String {
    let (v, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "µs")
    };
    format!("{} {unit}", v.round())
}

fn times(r: Option<f64>) -> String {
    r.map_or_else(|| "–".to_owned(), |r| format!("{r:.2}×"))
}

/// One table row's cells for a system (workload column excluded).
fn row_cells(s: &SystemReport) -> Vec<String> {
    let name = s.system.name().to_owned();
    match (&s.summary, s.status) {
        (_, Status::NotApplicable) => vec![
            name,
            "n/a".into(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            "0".into(),
            s.reason.clone().unwrap_or_default(),
        ],
        (None, _) => vec![
            name,
            "failed".into(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            format!("0/{}", s.runs.len()),
            s.setting.clone().unwrap_or_default(),
        ],
        (Some(m), status) => vec![
            name,
            thousands(m.records_per_s.median),
            format!("{:.1}", m.mb_per_s.median),
            format!("±{:.1}%", m.records_per_s.pct),
            latency(m.latency_us.p50),
            latency(m.latency_us.p99),
            latency(m.latency_us.p999),
            if status == Status::Ok {
                m.runs.to_string()
            } else {
                format!("{}/{} ok", m.runs, s.runs.len())
            },
            s.setting.clone().unwrap_or_default(),
        ],
    }
}

const HEADERS: [&str; 9] = [
    "system",
    "records/s",
    "MB/s",
    "spread",
    "p50",
    "p99",
    "p99.9",
    "runs",
    "setting",
];

/// Said of fixed-rate workloads, whose throughput ratios are 1 by construction.
const FIXED_RATE_NOTE: &str = "(fixed rate: throughput is the offered load; compare latency)";

/// The ratio line of a workload: `rill/redis 1.52×  rill/nats 0.98×  ...`.
fn ratio_line(w: &WorkloadReport) -> Option<String> {
    let r = &w.ratios;
    if r.throughput.is_empty() {
        return None;
    }
    // In the order of the systems, not of the map.
    let mut parts: Vec<String> = w
        .systems
        .iter()
        .filter_map(|s| {
            let peer = s.system.name();
            let x = r.throughput.get(peer)?;
            Some(format!("rill/{peer} {}", times(Some(*x))))
        })
        .collect();
    if let Some(best) = r.best_peer {
        parts.push(format!(
            "rill/best peer ({}) {}",
            best.name(),
            times(r.throughput_vs_best_peer)
        ));
    }
    if let Some(best) = r.best_p99_peer {
        parts.push(format!(
            "p99 rill/best peer ({}) {}",
            best.name(),
            times(r.p99_vs_best_peer)
        ));
    }
    if w.workload.rate.is_some() {
        parts.push(FIXED_RATE_NOTE.to_owned());
    }
    Some(parts.join("   "))
}

impl Report {
    /// The readable table printed to stdout.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(
            out,
            "rill-peers: {} set, {} round(s), {} on {} ({} cores, {})",
            self.set, self.rounds, m.date, m.cpu, m.cores, m.memory
        );
        let rows: Vec<Vec<String>> = self
            .workloads
            .iter()
            .flat_map(|w| w.systems.iter().map(row_cells))
            .chain(std::iter::once(HEADERS.map(str::to_owned).to_vec()))
            .collect();
        let mut widths = [0usize; HEADERS.len()];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::from("  ");
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                let pad = w.saturating_sub(cell.chars().count());
                // Numbers right-aligned, names and settings left-aligned.
                if i == 0 || i == HEADERS.len() - 1 {
                    s.push_str(cell);
                    s.push_str(&" ".repeat(pad + 2));
                } else {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(cell);
                    s.push_str("  ");
                }
            }
            s.trim_end().to_owned()
        };
        for w in &self.workloads {
            let _ = writeln!(out, "\n{} — {}", w.name, w.description);
            let _ = writeln!(out, "{}", line(&HEADERS.map(str::to_owned)));
            for s in &w.systems {
                let _ = writeln!(out, "{}", line(&row_cells(s)));
            }
            if let Some(r) = ratio_line(w) {
                let _ = writeln!(out, "  {r}");
            }
        }
        let failed = self.failed_runs();
        if failed > 0 {
            let _ = writeln!(out, "\n{failed} run(s) failed; errors are in latest.json");
            for w in &self.workloads {
                for s in &w.systems {
                    for r in &s.runs {
                        if let Some(e) = &r.error {
                            let first = e.lines().next().unwrap_or_default();
                            let _ = writeln!(
                                out,
                                "  {} round {} {}: {first}",
                                w.name,
                                r.round,
                                s.system.name()
                            );
                        }
                    }
                }
            }
        }
        out
    }

    /// The tables in Markdown, ready to paste into `docs/BENCHMARKS.md`.
    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(
            out,
            "Run {}: `{}` set, {} round(s) per system in alternation, on {} ({} cores, {} RAM); {}.\n",
            m.date,
            self.set,
            self.rounds,
            md_escape(&m.cpu),
            m.cores,
            m.memory,
            m.versions
                .iter()
                .map(|(k, v)| format!("{k}: `{v}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            out,
            "Records/s and MB/s are medians over rounds; spread is half the min–max range \
             as ± % of the median; latencies are medians over rounds of each run's \
             percentile.\n"
        );
        let _ = writeln!(out, "| workload | {} |", HEADERS.join(" | "));
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for w in &self.workloads {
            for (i, s) in w.systems.iter().enumerate() {
                let name = if i == 0 {
                    format!("`{}`", w.name)
                } else {
                    String::new()
                };
                let cells: Vec<String> = row_cells(s).iter().map(|c| md_escape(c)).collect();
                let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
            }
        }
        let peers: Vec<System> = self
            .systems
            .iter()
            .copied()
            .filter(|s| *s != System::Rill)
            .collect();
        if self.systems.contains(&System::Rill) && !peers.is_empty() {
            let _ = writeln!(
                out,
                "\nRill's median throughput divided by each peer's and by the better \
                 peer's (above 1: Rill is faster), and Rill's median p99 divided by the \
                 lower peer p99 (below 1: Rill's is lower).\n"
            );
            let peer_heads: Vec<String> =
                peers.iter().map(|p| format!("rill/{}", p.name())).collect();
            let _ = writeln!(
                out,
                "| workload | description | {} | rill/best peer | p99 rill/best peer |",
                peer_heads.join(" | ")
            );
            let _ = writeln!(out, "|---|---|{}---:|---:|", "---:|".repeat(peers.len()));
            for w in &self.workloads {
                let r = &w.ratios;
                let per_peer: Vec<String> = peers
                    .iter()
                    .map(|p| times(r.throughput.get(p.name()).copied()))
                    .collect();
                let best = |peer: Option<System>, x: Option<f64>| match peer {
                    Some(p) if x.is_some() => format!("{} ({})", times(x), p.name()),
                    _ => times(None),
                };
                let mut best_throughput = best(r.best_peer, r.throughput_vs_best_peer);
                if w.workload.rate.is_some() {
                    best_throughput.push_str(" fixed rate");
                }
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} | {} | {} |",
                    w.name,
                    md_escape(&w.description),
                    per_peer.join(" | "),
                    best_throughput,
                    best(r.best_p99_peer, r.p99_vs_best_peer)
                );
            }
        }
        out
    }

    /// Runs that failed, over all workloads and systems.
    pub(crate) fn failed_runs(&self) -> usize {
        self.workloads
            .iter()
            .flat_map(|w| &w.systems)
            .flat_map(|s| &s.runs)
            .filter(|r| r.error.is_some())
            .count()
    }

    /// Everything, as pretty JSON.
    pub(crate) fn json(&self) -> anyhow::Result<String> {
        serde_json::to_string_pretty(self).context("cannot encode the report as JSON")
    }
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Writes `latest.json`, `latest.md` and `latest.svg` into `dir` (created if missing).
pub(crate) fn write(report: &Report, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let files = [
        ("latest.json", report.json()?),
        ("latest.md", report.markdown()),
        ("latest.svg", svg(report)),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// SVG

/// Chart width in px.
const SVG_W: f64 = 980.0;
const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
/// The percentiles on the latency charts' x axis.
const PERCENTILES: [&str; 5] = ["p50", "p90", "p99", "p99.9", "max"];

fn color(system: System) -> &'static str {
    match system {
        System::Rill => "#1b9e77",
        System::Redis => "#d62728",
        System::Nats => "#1f5fb4",
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Appends a `<text>` element.
fn text(out: &mut String, x: f64, y: f64, size: f64, attrs: &str, content: &str) {
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" {attrs}>{}</text>"#,
        xml(content)
    );
}

fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), attrs: &str) {
    let _ = writeln!(
        out,
        r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {attrs}/>"#
    );
}

fn percentiles(l: &LatencySummary) -> [f64; 5] {
    [l.p50, l.p90, l.p99, l.p999, l.max]
}

/// The chart: a legend, throughput bars per workload (normalised to the workload's best
/// system, labelled with absolute figures, whiskers from min to max), then one panel of
/// latency percentiles (log scale) per end-to-end workload.
pub(crate) fn svg(report: &Report) -> String {
    let mut body = String::new();
    let mut y = 28.0;
    text(
        &mut body,
        20.0,
        y,
        18.0,
        r#"font-weight="bold""#,
        "Rill vs Redis Streams vs NATS JetStream",
    );
    y += 20.0;
    let m = &report.machine;
    text(
        &mut body,
        20.0,
        y,
        11.0,
        r##"fill="#555""##,
        &format!(
            "{} · {} set, {} round(s) · {} ({} cores, {})",
            m.date, report.set, report.rounds, m.cpu, m.cores, m.memory
        ),
    );
    // Legend.
    let mut x = SVG_W - 300.0;
    for s in &report.systems {
        let _ = writeln!(
            body,
            r#"<rect class="legend" x="{x:.1}" y="18" width="14" height="14" fill="{}"/>"#,
            color(*s)
        );
        text(&mut body, x + 19.0, 30.0, 12.0, "", s.name());
        x += 80.0;
    }

    // Throughput.
    y += 34.0;
    text(
        &mut body,
        20.0,
        y,
        14.0,
        r#"font-weight="bold""#,
        "Throughput: median records/s (bars relative to each workload's fastest run; whiskers: min–max)",
    );
    y += 14.0;
    let (bar_x, bar_w, bar_h) = (330.0, 310.0, 16.0);
    for w in &report.workloads {
        let row_h = bar_h * report.systems.len().max(1) as f64 + 4.0 * report.systems.len() as f64;
        y += 10.0;
        line(
            &mut body,
            (20.0, y - 5.0),
            (SVG_W - 20.0, y - 5.0),
            r##"stroke="#ddd""##,
        );
        text(
            &mut body,
            20.0,
            y + 12.0,
            12.0,
            r#"font-weight="bold""#,
            &w.name,
        );
        text(
            &mut body,
            20.0,
            y + 26.0,
            9.5,
            r##"fill="#555""##,
            &w.description,
        );
        let best = w
            .systems
            .iter()
            .filter_map(|s| s.summary.map(|m| m.records_per_s.max))
            .fold(0.0, f64::max);
        for (i, system) in report.systems.iter().enumerate() {
            let by = y + i as f64 * (bar_h + 4.0);
            let Some(s) = w.system(*system) else {
                continue;
            };
            match (s.summary, s.status) {
                (Some(m), _) if best > 0.0 => {
                    let len = (m.records_per_s.median / best * bar_w).max(1.0);
                    let _ = writeln!(
                        body,
                        r#"<rect class="bar" x="{bar_x:.1}" y="{by:.1}" width="{len:.1}" height="{bar_h}" fill="{}"/>"#,
                        color(*system)
                    );
                    let (lo, hi) = (
                        bar_x + m.records_per_s.min / best * bar_w,
                        bar_x + m.records_per_s.max / best * bar_w,
                    );
                    let cy = by + bar_h / 2.0;
                    if hi - lo >= 0.5 {
                        let attrs = r##"stroke="#222" stroke-width="1.2""##;
                        line(&mut body, (lo, cy), (hi, cy), attrs);
                        line(&mut body, (lo, cy - 4.0), (lo, cy + 4.0), attrs);
                        line(&mut body, (hi, cy - 4.0), (hi, cy + 4.0), attrs);
                    }
                    text(
                        &mut body,
                        bar_x + bar_w + 8.0,
                        by + 12.0,
                        10.5,
                        "",
                        &format!(
                            "{} {} rec/s · {} MB/s · ±{:.1}% · p99 {}",
                            system.name(),
                            compact(m.records_per_s.median),
                            mb(m.mb_per_s.median),
                            m.records_per_s.pct,
                            latency(m.latency_us.p99)
                        ),
                    );
                }
                (_, status) => {
                    let what = if status == Status::NotApplicable {
                        format!(
                            "{} n/a: {}",
                            system.name(),
                            s.reason.clone().unwrap_or_default()
                        )
                    } else {
                        format!("{} failed", system.name())
                    };
                    text(
                        &mut body,
                        bar_x + 4.0,
                        by + 12.0,
                        11.0,
                        r##"fill="#888" font-style="italic""##,
                        &what,
                    );
                }
            }
        }
        y += row_h.max(32.0) + 2.0;
    }

    // Latency percentiles of the e2e workloads.
    let e2e: Vec<&WorkloadReport> = report
        .workloads
        .iter()
        .filter(|w| w.workload.kind == Kind::E2e)
        .collect();
    if !e2e.is_empty() {
        y += 30.0;
        text(
            &mut body,
            20.0,
            y,
            14.0,
            r#"font-weight="bold""#,
            "End-to-end latency percentiles (median over rounds; log scale)",
        );
        y += 12.0;
        let (cols, panel_w, panel_h, gap) = (3usize, 300.0, 230.0, 20.0);
        for (i, w) in e2e.iter().enumerate() {
            let px = 20.0 + (i % cols) as f64 * (panel_w + gap);
            let py = y + (i / cols) as f64 * (panel_h + gap);
            latency_panel(&mut body, w, &report.systems, (px, py), (panel_w, panel_h));
        }
        y += e2e.len().div_ceil(cols) as f64 * (panel_h + gap);
    }
    let height = (y + 20.0).ceil();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{SVG_W}\" height=\"{height}\" \
         viewBox=\"0 0 {SVG_W} {height}\" font-family=\"{FONT}\">\n\
         <rect x=\"0\" y=\"0\" width=\"{SVG_W}\" height=\"{height}\" fill=\"white\"/>\n\
         {body}</svg>\n"
    )
}

/// One latency panel: x = percentiles, y = log10 µs, one polyline per system.
fn latency_panel(
    out: &mut String,
    w: &WorkloadReport,
    systems: &[System],
    (px, py): (f64, f64),
    (pw, ph): (f64, f64),
) {
    let _ = writeln!(
        out,
        r##"<rect x="{px:.1}" y="{py:.1}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>"##
    );
    text(
        out,
        px + 8.0,
        py + 16.0,
        12.0,
        r#"font-weight="bold""#,
        &w.name,
    );
    let (left, right, top, bottom) = (px + 58.0, px + pw - 14.0, py + 30.0, py + ph - 28.0);
    let curves: Vec<(System, [f64; 5])> = systems
        .iter()
        .filter_map(|s| {
            let m = w.system(*s)?.summary?;
            Some((*s, percentiles(&m.latency_us).map(|v| v.max(1.0))))
        })
        .collect();
    if curves.is_empty() {
        text(
            out,
            px + 8.0,
            py + 40.0,
            11.0,
            r##"fill="#888" font-style="italic""##,
            "no results",
        );
        return;
    }
    let all = curves.iter().flat_map(|c| c.1);
    let lo = all.clone().fold(f64::INFINITY, f64::min).log10().floor();
    let mut hi = all.fold(0.0, f64::max).log10().ceil();
    if hi <= lo {
        hi = lo + 1.0;
    }
    let yof = |v: f64| bottom - (v.log10() - lo) / (hi - lo) * (bottom - top);
    let xof = |i: usize| left + i as f64 * (right - left) / (PERCENTILES.len() - 1) as f64;
    // Grid: decades labelled, and 2× and 5× lines, labelled too when the range is short.
    let label_minor = hi - lo <= 2.0;
    let mut d = lo;
    while d <= hi + 1e-9 {
        for (k, minor) in [(1.0, false), (2.0, true), (5.0, true)] {
            let v = k * 10f64.powf(d);
            if v.log10() > hi + 1e-9 {
                break;
            }
            let gy = yof(v);
            let stroke = if minor { "#f0f0f0" } else { "#dcdcdc" };
            line(
                out,
                (left, gy),
                (right, gy),
                &format!(r#"stroke="{stroke}""#),
            );
            if !minor || label_minor {
                text(
                    out,
                    left - 6.0,
                    gy + 4.0,
                    10.0,
                    r##"text-anchor="end" fill="#444""##,
                    &round_latency(v),
                );
            }
        }
        d += 1.0;
    }
    line(out, (left, top), (left, bottom), r##"stroke="#888""##);
    line(out, (left, bottom), (right, bottom), r##"stroke="#888""##);
    for (i, p) in PERCENTILES.iter().enumerate() {
        text(
            out,
            xof(i),
            bottom + 16.0,
            10.0,
            r##"text-anchor="middle" fill="#444""##,
            p,
        );
    }
    for (system, values) in &curves {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", xof(i), yof(*v)))
            .collect();
        let c = color(*system);
        let _ = writeln!(
            out,
            r#"<polyline class="curve" points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            points.join(" ")
        );
        for (i, v) in values.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{c}"><title>{} {}: {}</title></circle>"#,
                xof(i),
                yof(*v),
                system.name(),
                PERCENTILES[i],
                xml(&latency(*v))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::smoke_set;

    fn result(records_per_s: f64, p99: f64) -> RunResult {
        RunResult {
            records: 2000,
            bytes: 2_048_000,
            seconds: 2000.0 / records_per_s,
            records_per_s,
            mb_per_s: records_per_s * 1024.0 / 1e6,
            latency_us: LatencySummary {
                p50: p99 / 4.0,
                p90: p99 / 2.0,
                p99,
                p999: p99 * 2.0,
                max: p99 * 5.0,
            },
        }
    }

    fn runs(values: &[(f64, f64)]) -> Vec<Run> {
        values
            .iter()
            .enumerate()
            .map(|(i, (r, p))| Run::new(i as u32 + 1, Ok(result(*r, *p))))
            .collect()
    }

    /// A report over the whole smoke set: Rill at 3 runs, Redis with one failure, NATS
    /// n/a on fsync workloads.
    fn sample() -> Report {
        let workloads = smoke_set()
            .into_iter()
            .map(|w| {
                let mut systems = vec![
                    SystemReport::ran(
                        System::Rill,
                        "durability interval:1000".into(),
                        runs(&[(300.0, 900.0), (100.0, 1100.0), (200.0, 1000.0)]),
                    ),
                    SystemReport::ran(System::Redis, "AOF appendfsync everysec".into(), {
                        let mut r = runs(&[(100.0, 2000.0), (100.0, 2000.0)]);
                        r.push(Run::new(3, Err("redis <exploded> & died".into())));
                        r
                    }),
                ];
                systems.push(if w.durability == Durability::Fsync {
                    SystemReport::not_applicable(System::Nats, w.durability)
                } else {
                    SystemReport::ran(
                        System::Nats,
                        "JetStream file storage".into(),
                        runs(&[(400.0, 500.0)]),
                    )
                });
                WorkloadReport::new(w, systems)
            })
            .collect();
        Report {
            machine: Machine {
                cpu: "Test CPU <x>".into(),
                cores: 2,
                date: rfc3339(std::time::UNIX_EPOCH),
                ..Machine::default()
            },
            set: "smoke".into(),
            rounds: 3,
            systems: System::ALL.to_vec(),
            workloads,
        }
    }

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        let s = spread(&[90.0, 100.0, 120.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (100.0, 90.0, 120.0));
        assert!((s.pct - 15.0).abs() < 1e-9);
        assert_eq!(spread(&[5.0]).unwrap().pct, 0.0);
        assert_eq!(spread(&[0.0, 0.0]).unwrap().pct, 0.0);
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
        assert_eq!(ratio(0.0, 2.0), None);
        assert_eq!(ratio(f64::INFINITY, 2.0), None);
    }

    #[test]
    fn summaries_status_and_ratios() {
        let r = sample();
        let w = &r.workloads[0];
        let rill = w.system(System::Rill).unwrap();
        assert_eq!(rill.status, Status::Ok);
        let m = rill.summary.unwrap();
        assert_eq!(m.runs, 3);
        assert_eq!(m.records_per_s.median, 200.0);
        assert!((m.records_per_s.pct - 50.0).abs() < 1e-9);
        assert_eq!(m.latency_us.p99, 1000.0);
        assert_eq!(m.latency_us.p50, 250.0);

        let redis = w.system(System::Redis).unwrap();
        assert_eq!(redis.status, Status::Partial);
        assert_eq!(redis.summary.unwrap().runs, 2);
        assert!(redis.reason.as_deref().unwrap().contains("exploded"));

        // Rill 200 vs Redis 100 and NATS 400: 2×, 0.5×, best peer NATS; p99 1000 vs
        // NATS's 500 (the lower).
        assert_eq!(w.ratios.throughput["redis"], 2.0);
        assert_eq!(w.ratios.throughput["nats"], 0.5);
        assert_eq!(w.ratios.best_peer, Some(System::Nats));
        assert_eq!(w.ratios.throughput_vs_best_peer, Some(0.5));
        assert_eq!(w.ratios.best_p99_peer, Some(System::Nats));
        assert_eq!(w.ratios.p99_vs_best_peer, Some(2.0));

        // On fsync workloads NATS is n/a and Redis is the only peer.
        let fsync = r
            .workloads
            .iter()
            .find(|w| w.workload.durability == Durability::Fsync)
            .unwrap();
        let nats = fsync.system(System::Nats).unwrap();
        assert_eq!(nats.status, Status::NotApplicable);
        assert!(nats.reason.as_deref().unwrap().contains("2.9"));
        assert_eq!(fsync.ratios.best_peer, Some(System::Redis));
        assert_eq!(fsync.ratios.throughput_vs_best_peer, Some(2.0));
        assert_eq!(fsync.ratios.p99_vs_best_peer, Some(0.5));
        assert_eq!(r.failed_runs(), r.workloads.len());

        // Without Rill results, no ratios.
        let failed =
            SystemReport::ran(System::Rill, "x".into(), vec![Run::new(1, Err("e".into()))]);
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(failed.summary, None);
        assert_eq!(ratios(&[failed]), Ratios::default());
    }

    #[test]
    fn json_round_trips() {
        let r = sample();
        let v: serde_json::Value = serde_json::from_str(&r.json().unwrap()).unwrap();
        assert_eq!(v["set"], "smoke");
        assert_eq!(v["machine"]["date"], "1970-01-01T00:00:00Z");
        let ws = v["workloads"].as_array().unwrap();
        assert_eq!(ws.len(), r.workloads.len());
        let first = &ws[0];
        assert_eq!(first["workload"]["messages"], 2000);
        assert_eq!(first["systems"][0]["system"], "rill");
        assert_eq!(first["systems"][0]["status"], "ok");
        assert_eq!(first["systems"][0]["runs"][0]["result"]["records"], 2000);
        assert_eq!(first["systems"][1]["status"], "partial");
        assert_eq!(
            first["systems"][1]["runs"][2]["error"],
            "redis <exploded> & died"
        );
        assert_eq!(first["ratios"]["throughput"]["redis"], 2.0);
        let fsync = ws
            .iter()
            .find(|w| w["workload"]["durability"] == "fsync")
            .unwrap();
        assert_eq!(fsync["systems"][2]["status"], "n/a");
        assert!(fsync["systems"][2]["setting"].is_null());
    }

    /// Checks that every opened tag is closed in order (enough for the SVG we write).
    fn well_formed(xml: &str) -> Result<(), String> {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = xml;
        while let Some(start) = rest.find('<') {
            let end = rest[start..]
                .find('>')
                .ok_or_else(|| "unclosed <".to_owned())?
                + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                match stack.pop() {
                    Some(open) if open == name => {}
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap_or_default();
                stack.push(name.to_owned());
            }
        }
        if stack.is_empty() {
            Ok(())
        } else {
            Err(format!("unclosed {stack:?}"))
        }
    }

    #[test]
    fn svg_is_well_formed_with_a_bar_per_result_and_a_curve_per_e2e_system() {
        let r = sample();
        let svg = svg(&r);
        well_formed(&svg).unwrap();
        assert!(well_formed("<a><b></a>").is_err());
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("Test CPU &lt;x&gt;"));
        assert!(!svg.contains("NaN") && !svg.contains("inf\""));
        let with_summary = r
            .workloads
            .iter()
            .flat_map(|w| &w.systems)
            .filter(|s| s.summary.is_some())
            .count();
        assert_eq!(svg.matches(r#"class="bar""#).count(), with_summary);
        let e2e_curves: usize = r
            .workloads
            .iter()
            .filter(|w| w.workload.kind == Kind::E2e)
            .map(|w| w.systems.iter().filter(|s| s.summary.is_some()).count())
            .sum();
        assert!(e2e_curves > 0);
        assert_eq!(svg.matches(r#"class="curve""#).count(), e2e_curves);
        assert_eq!(svg.matches("<circle").count(), e2e_curves * 5);
        assert_eq!(svg.matches(r#"class="legend""#).count(), 3);
        assert!(svg.contains("nats n/a"));
    }

    #[test]
    fn tables() {
        let r = sample();
        let text = r.text();
        assert!(text.contains("produce-1k — produce 1 KiB"));
        assert!(
            text.contains("  rill/redis 2.00×   rill/nats 0.50×   rill/best peer (nats) 0.50×")
        );
        assert!(text.contains("n/a"));
        assert!(text.contains("2/3 ok"));
        let md = r.markdown();
        let table_rows = md.lines().filter(|l| l.starts_with("| `")).count();
        // One row per workload in the results (first system) and in the ratios table.
        assert_eq!(table_rows, 2 * r.workloads.len());
        assert!(md.contains("| rill/redis | rill/nats |"));
    }

    #[test]
    fn formats() {
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(compact(1_234_567.0), "1.23M");
        assert_eq!(compact(45_600.0), "45.6k");
        assert_eq!(latency(850.0), "850 µs");
        assert_eq!(latency(1234.0), "1.23 ms");
        assert_eq!(latency(2_350_000.0), "2.35 s");
        assert_eq!(round_latency(1000.0), "1 ms");
        assert_eq!(round_latency(20.0), "20 µs");
        assert_eq!(round_latency(5e6), "5 s");
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
