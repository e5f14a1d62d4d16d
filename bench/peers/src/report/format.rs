//! Numbers and latencies for people: thousands separators, compact rates, MB/s and
//! latencies in a readable unit.

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
pub(super) fn compact(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// MB/s with a decimal below 10: `0.4`, `12`.
pub(super) fn mb(x: f64) -> String {
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
pub(super) fn round_latency(us: f64) -> String {
    let (v, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "µs")
    };
    format!("{} {unit}", v.round())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
