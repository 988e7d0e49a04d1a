//! Latency histograms of the rollup (SPEC §18): calls counted per bucket of upstream
//! latency, buckets growing by 4% each, so a percentile read from the bucket's middle is
//! within 2% of the exact one (the contract allows 5%).
//!
//! Bucket 0 holds calls under [`BASE_MICROS`]; bucket `i ≥ 1` those in
//! `[BASE · 1.04^(i-1), BASE · 1.04^i)`; the last ([`BUCKETS`] - 1) everything slower
//! (about ten minutes). Stored as `integer[]` without trailing empty buckets, so a row of
//! fast calls keeps a short array; `usage_hist_add` (migration V19) adds two of them.

/// Lower edge of bucket 1, in microseconds.
pub const BASE_MICROS: f64 = 100.0;
/// Growth from one bucket to the next.
pub const GROWTH: f64 = 1.04;
/// Buckets in all.
pub const BUCKETS: usize = 400;

/// The bucket of a latency.
pub fn bucket_of(micros: u64) -> usize {
    if (micros as f64) < BASE_MICROS {
        return 0;
    }
    let i = ((micros as f64 / BASE_MICROS).ln() / GROWTH.ln()).floor() as usize + 1;
    i.min(BUCKETS - 1)
}

/// The latency a bucket stands for, in milliseconds: the geometric middle of its edges
/// (bucket 0: half the base).
pub fn middle_ms(bucket: usize) -> f64 {
    if bucket == 0 {
        return BASE_MICROS / 2_000.0;
    }
    let low = BASE_MICROS * GROWTH.powi(bucket as i32 - 1);
    low * GROWTH.sqrt() / 1_000.0
}

/// Counts per bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<i32>,
}

impl Histogram {
    pub fn record(&mut self, micros: u64) {
        let bucket = bucket_of(micros);
        if self.counts.len() <= bucket {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] = self.counts[bucket].saturating_add(1);
    }

    /// Adds a stored histogram.
    pub fn add(&mut self, counts: &[i32]) {
        if self.counts.len() < counts.len() {
            self.counts.resize(counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(counts) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// The counts as stored, without trailing empty buckets.
    pub fn counts(&self) -> &[i32] {
        let end = self
            .counts
            .iter()
            .rposition(|c| *c != 0)
            .map_or(0, |i| i + 1);
        &self.counts[..end]
    }

    pub fn total(&self) -> i64 {
        self.counts.iter().map(|c| i64::from(*c)).sum()
    }

    /// The latency at quantile `q` (0–1) in milliseconds, or `None` for no calls: the
    /// middle of the bucket holding the call of that rank.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        // The rank of the call at `q` (1-based), as nearest-rank percentiles count.
        let rank = ((q * total as f64).ceil() as i64).clamp(1, total);
        let mut seen = 0i64;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += i64::from(*count);
            if seen >= rank {
                return Some(middle_ms(bucket));
            }
        }
        None
    }
}

/// `{1,0,3}`: a histogram as PostgreSQL's array literal.
pub fn array_literal(counts: &[i32]) -> String {
    let mut out = String::with_capacity(2 + counts.len() * 2);
    out.push('{');
    let mut numbers = itoa::Buffer::new();
    for (i, count) in counts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(numbers.format(*count));
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_latency_reads_back_within_four_percent() {
        for micros in [
            150u64, 999, 1_000, 5_432, 20_000, 250_000, 3_000_000, 59_000_000,
        ] {
            let mut h = Histogram::default();
            h.record(micros);
            let read = h.quantile_ms(0.5).unwrap();
            let exact = micros as f64 / 1_000.0;
            assert!(
                (read - exact).abs() / exact <= 0.02,
                "{micros} µs read as {read} ms"
            );
        }
    }

    #[test]
    fn percentiles_follow_the_ranks_and_stored_counts_add_up() {
        let mut h = Histogram::default();
        for ms in 1..=100u64 {
            h.record(ms * 1_000);
        }
        for (q, exact) in [(0.5, 50.0), (0.95, 95.0), (0.99, 99.0)] {
            let read = h.quantile_ms(q).unwrap();
            assert!((read - exact).abs() / exact <= 0.05, "p{q}: {read}");
        }
        let mut merged = Histogram::default();
        merged.add(h.counts());
        merged.add(h.counts());
        assert_eq!(merged.total(), 200);
        assert_eq!(merged.quantile_ms(0.5), h.quantile_ms(0.5));
        assert_eq!(Histogram::default().quantile_ms(0.5), None);
        assert!(Histogram::default().counts().is_empty());
    }
}
