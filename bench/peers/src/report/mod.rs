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
//!
//! The parts: [`stats`] (medians, spreads, summaries and ratios),
//! [`format`](mod@format) (numbers and latencies for people), [`table`] (the text and
//! Markdown tables), [`svg`] (the chart) and [`machine`] (what the comparison ran on).

mod format;
mod machine;
mod stats;
mod svg;
mod table;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::System;
use crate::measure::{LatencySummary, RunResult};
use crate::workload::{Durability, Workload};

pub(crate) use format::{latency, thousands};
pub(crate) use machine::Machine;

use stats::{ratios, summarise};

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

    pub(super) fn system(&self, system: System) -> Option<&SystemReport> {
        self.systems.iter().find(|s| s.system == system)
    }
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

impl Report {
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

/// Writes `latest.json`, `latest.md` and `latest.svg` into `dir` (created if missing).
pub(crate) fn write(report: &Report, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let files = [
        ("latest.json", report.json()?),
        ("latest.md", report.markdown()),
        ("latest.svg", svg::svg(report)),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::machine::rfc3339;
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
    pub(super) fn sample() -> Report {
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
}
