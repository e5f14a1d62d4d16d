//! Latency histograms and the bench report (human lines or one JSON object).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// A latency histogram in microseconds: 3 significant digits, 1 µs to 1 hour (longer
/// values count as 1 hour).
const HIGHEST_US: u64 = 3_600_000_000;

#[derive(Debug, Clone)]
pub(super) struct Latency(Histogram<u64>);

impl Latency {
    pub(super) fn new() -> Self {
        // Constant, valid bounds: creation cannot fail.
        Self(
            Histogram::new_with_bounds(1, HIGHEST_US, 3)
                .unwrap_or_else(|e| unreachable!("histogram bounds: {e}")),
        )
    }

    pub(super) fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us);
    }

    pub(super) fn record_n_us(&mut self, us: u64, n: u64) {
        self.0.saturating_record_n(us, n);
    }

    pub(super) fn record(&mut self, d: Duration) {
        self.record_us(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    pub(super) fn merge(&mut self, other: &Self) -> anyhow::Result<()> {
        self.0
            .add(&other.0)
            .map_err(|e| anyhow::anyhow!("merging latency histograms: {e:?}"))
    }

    pub(super) fn summary(&self) -> Summary {
        let h = &self.0;
        let q = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64
            }
        };
        Summary {
            samples: h.len(),
            mean: if h.is_empty() { 0.0 } else { h.mean() },
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: if h.is_empty() { 0.0 } else { h.max() as f64 },
        }
    }
}

/// Percentiles of a histogram, in microseconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Summary {
    pub(super) samples: u64,
    pub(super) mean: f64,
    pub(super) p50: f64,
    pub(super) p90: f64,
    pub(super) p99: f64,
    pub(super) p999: f64,
    pub(super) max: f64,
}

impl Summary {
    fn to_json(self) -> Value {
        json!({
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "p999": self.p999,
            "max": self.max,
            "mean": round(self.mean, 1),
            "samples": self.samples,
        })
    }

    fn line(self) -> String {
        format!(
            "p50 {:.0}  p90 {:.0}  p99 {:.0}  p99.9 {:.0}  max {:.0}  (mean {:.0}, {} samples)",
            self.p50, self.p90, self.p99, self.p999, self.max, self.mean, self.samples
        )
    }
}

/// The measured result of one run.
#[derive(Debug)]
pub(super) struct Report {
    pub(super) records: u64,
    pub(super) bytes: u64,
    pub(super) seconds: f64,
    /// The headline latency: per request (produce, consume) or publish-to-receive (e2e).
    pub(super) latency: Summary,
    /// What `latency` measures.
    pub(super) latency_kind: &'static str,
    /// e2e only: per produce request.
    pub(super) produce_latency: Option<Summary>,
    /// Settings echoed into the output, in order.
    pub(super) settings: Vec<(&'static str, Value)>,
    /// With `--limits`: the run's throughput as fractions of the limits, and the limits.
    pub(super) limits: Option<(Value, super::limits::Limits)>,
    /// produce of at least two gigabytes: MB/s of each whole gigabyte in turn.
    pub(super) gigabytes: Option<Vec<f64>>,
}

/// MB/s of each span between `start` and the marks, every span `bytes` long; `None`
/// below two spans (a single figure says nothing a run's total does not).
pub(super) fn per_gigabyte(start: Instant, marks: &[Instant], bytes: u64) -> Option<Vec<f64>> {
    if marks.len() < 2 {
        return None;
    }
    let mut from = start;
    let mut rates = Vec::with_capacity(marks.len());
    for &mark in marks {
        let seconds = mark.saturating_duration_since(from).as_secs_f64().max(1e-9);
        rates.push(round(bytes as f64 / 1e6 / seconds, 1));
        from = mark;
    }
    Some(rates)
}

/// The sustained-rate summary of per-gigabyte rates: the first, the lowest, the lowest
/// as a fraction of the first, and the mean from the third gigabyte on.
fn sustained(rates: &[f64]) -> Value {
    let first = rates.first().copied().unwrap_or(0.0);
    let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let later = rates.get(2..).filter(|r| !r.is_empty());
    json!({
        "first_gb_mb_per_s": first,
        "min_mb_per_s": min,
        "min_over_first": if first > 0.0 { round(min / first, 3) } else { 0.0 },
        "from_third_gb_mb_per_s": later.map(|r| round(r.iter().sum::<f64>() / r.len() as f64, 1)),
    })
}

impl Report {
    pub(super) fn records_per_s(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }

    pub(super) fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }

    pub(super) fn to_json(&self, workload: &str) -> Value {
        let mut o = serde_json::Map::new();
        o.insert("workload".into(), json!(workload));
        o.insert("records".into(), json!(self.records));
        o.insert("bytes".into(), json!(self.bytes));
        o.insert("seconds".into(), json!(round(self.seconds, 6)));
        o.insert(
            "records_per_s".into(),
            json!(round(self.records_per_s(), 1)),
        );
        o.insert("mb_per_s".into(), json!(round(self.mb_per_s(), 3)));
        o.insert("latency_us".into(), self.latency.to_json());
        o.insert("latency_kind".into(), json!(self.latency_kind));
        if let Some(p) = self.produce_latency {
            o.insert("produce_request_latency_us".into(), p.to_json());
        }
        for (k, v) in &self.settings {
            o.insert((*k).into(), v.clone());
        }
        if let Some(rates) = &self.gigabytes {
            o.insert("per_gb_mb_per_s".into(), json!(rates));
            o.insert("sustained".into(), sustained(rates));
        }
        if let Some((fractions, limits)) = &self.limits {
            o.insert("limits".into(), limits.to_json());
            o.insert("fraction_of_limits".into(), fractions.clone());
        }
        Value::Object(o)
    }

    /// Prints the report to stdout: one JSON object, or a few human lines.
    pub(super) fn print(&self, workload: &str, json: bool) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        if json {
            serde_json::to_writer(&mut out, &self.to_json(workload))?;
            writeln!(out)?;
        } else {
            let settings: Vec<String> = self
                .settings
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => format!("{k} {s}"),
                    other => format!("{k} {other}"),
                })
                .collect();
            writeln!(out, "bench {workload}: {}", settings.join(", "))?;
            writeln!(
                out,
                "  {} records, {} bytes of values in {:.3} s",
                self.records, self.bytes, self.seconds
            )?;
            writeln!(
                out,
                "  throughput: {:.0} records/s, {:.2} MB/s",
                self.records_per_s(),
                self.mb_per_s()
            )?;
            writeln!(
                out,
                "  latency µs ({}): {}",
                self.latency_kind,
                self.latency.line()
            )?;
            if let Some(p) = self.produce_latency {
                writeln!(out, "  latency µs (produce request): {}", p.line())?;
            }
            if let Some(rates) = &self.gigabytes {
                let shown: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
                writeln!(out, "  MB/s per gigabyte: {}", shown.join(", "))?;
            }
            if let Some((fractions, limits)) = &self.limits {
                writeln!(out, "  limits measured before the run:")?;
                for line in limits.lines() {
                    writeln!(out, "  {line}")?;
                }
                writeln!(
                    out,
                    "  throughput as a fraction of {}: {}",
                    fractions["bound"].as_str().unwrap_or("?"),
                    fractions["of_bound"]
                )?;
            }
        }
        out.flush().context("writing the report to stdout")
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_merge() {
        let mut a = Latency::new();
        let mut b = Latency::new();
        for us in 1..=500 {
            a.record_us(us);
        }
        for us in 501..=1000 {
            b.record_us(us);
        }
        b.record_n_us(1_000_000, 1);
        a.merge(&b).unwrap();
        let s = a.summary();
        assert_eq!(s.samples, 1001);
        assert!((s.p50 - 501.0).abs() <= 1.0, "{s:?}");
        assert!((s.p90 - 901.0).abs() <= 1.0, "{s:?}");
        assert!(s.max >= 1_000_000.0 && s.max <= 1_001_000.0, "{s:?}");
        assert_eq!(Latency::new().summary().p99, 0.0);
        let mut c = Latency::new();
        c.record_us(u64::MAX);
        assert!(c.summary().max >= HIGHEST_US as f64);
    }

    #[test]
    fn rates_per_gigabyte_and_their_summary() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(per_gigabyte(start, &[at(1000)], 1_000_000_000), None);
        // 1 GB in 1 s, then 0.5 s, then 2 s, then 4 s.
        let marks = [at(1000), at(1500), at(3500), at(7500)];
        let rates = per_gigabyte(start, &marks, 1_000_000_000).unwrap();
        assert_eq!(rates, vec![1000.0, 2000.0, 500.0, 250.0]);
        let s = sustained(&rates);
        assert_eq!(s["first_gb_mb_per_s"], 1000.0);
        assert_eq!(s["min_mb_per_s"], 250.0);
        assert_eq!(s["min_over_first"], 0.25);
        assert_eq!(s["from_third_gb_mb_per_s"], 375.0);
        assert!(sustained(&rates[..2])["from_third_gb_mb_per_s"].is_null());
    }

    #[test]
    fn json_has_the_contract_fields() {
        let report = Report {
            records: 10,
            bytes: 1000,
            seconds: 0.5,
            latency: Latency::new().summary(),
            latency_kind: "request",
            produce_latency: None,
            settings: vec![("size", json!(100))],
            limits: None,
            gigabytes: None,
        };
        let v = report.to_json("produce");
        assert_eq!(v["workload"], "produce");
        assert_eq!(v["records_per_s"], 20.0);
        assert_eq!(v["mb_per_s"], 0.002);
        for k in ["p50", "p90", "p99", "p999", "max"] {
            assert!(v["latency_us"][k].is_f64(), "{k}");
        }
        assert_eq!(v["size"], 100);
    }
}
