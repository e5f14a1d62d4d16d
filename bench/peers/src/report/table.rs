//! The tables: [`Report::text`], printed to stdout, and [`Report::markdown`], written
//! to `latest.md`; one row per workload and system, and Rill's ratios to its peers.

use std::fmt::Write as _;

use super::format::{latency, thousands};
use super::{Report, Status, SystemReport, WorkloadReport};
use crate::System;

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
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use crate::report::tests::sample;

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
}
