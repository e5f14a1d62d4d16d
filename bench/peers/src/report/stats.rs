//! The statistics of a comparison: the median and spread of a measure over runs, a
//! system's [`Summary`] over its successful runs, and Rill's [`Ratios`] to its peers.

use super::{Ratios, Spread, Summary, SystemReport};
use crate::System;
use crate::measure::{LatencySummary, RunResult};

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &[f64]) -> Option<f64> {
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
fn spread(values: &[f64]) -> Option<Spread> {
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
fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && a > 0.0 && b > 0.0).then(|| a / b)
}

pub(super) fn summarise(runs: &[&RunResult]) -> Option<Summary> {
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
pub(super) fn ratios(systems: &[SystemReport]) -> Ratios {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample;
    use crate::report::{Run, Status};
    use crate::workload::Durability;

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
}
