//! The chart written to `latest.svg`, by hand: a legend, throughput bars per workload,
//! and a panel of latency percentiles per end-to-end workload.

use std::fmt::Write as _;

use super::format::{compact, latency, mb, round_latency};
use super::{Report, Status, WorkloadReport};
use crate::System;
use crate::measure::LatencySummary;
use crate::workload::Kind;

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
pub(super) fn svg(report: &Report) -> String {
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
    use crate::report::tests::sample;

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
}
