//! Medians and spread of repeated measurements, and how `perfvm bench` shows numbers.

use serde::Serialize;

/// Median with min and max of a set of measurements.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    /// The median (NaN without measurements).
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
    /// How many finite measurements.
    pub n: usize,
}

impl Summary {
    /// The summary of `values`, non-finite ones left out.
    pub fn of(values: &[f64]) -> Summary {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Summary { median: f64::NAN, min: f64::NAN, max: f64::NAN, n: 0 };
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 };
        Summary { median, min: v[0], max: v[v.len() - 1], n: v.len() }
    }
}

/// Engineering-friendly number formatting with thousands separators.
pub fn fmt(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    if x.abs() >= 100.0 {
        crate::format::thousands(x.round() as u64)
    } else {
        format!("{x:.2}")
    }
}

/// A rate with an SI prefix: "4.61 G/s".
pub fn per_second(x: f64) -> String {
    let (scale, prefix) = [(1e9, "G"), (1e6, "M"), (1e3, "k")].into_iter().find(|(s, _)| x >= *s).unwrap_or((1.0, ""));
    if x.is_finite() {
        format!("{:.2} {prefix}/s", x / scale)
    } else {
        "n/a".into()
    }
}

/// a / b as "12.3x".
pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("{:.1}x", a / b)
    } else {
        "n/a".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        let s = Summary::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 5.0, 3));
        assert_eq!(Summary::of(&[1.0, 2.0, 3.0, 10.0]).median, 2.5);
        assert_eq!(Summary::of(&[]).n, 0);
        assert_eq!(ratio(10.0, 4.0), "2.5x");
        assert_eq!(ratio(1.0, 0.0), "n/a");
        assert_eq!(per_second(4.614e9), "4.61 G/s");
        assert_eq!(per_second(1.09e6), "1.09 M/s");
        assert_eq!(per_second(f64::NAN), "n/a");
    }
}
