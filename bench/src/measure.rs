//! Timing helpers: warm-up, per-iteration (or per-batch) timing and percentiles.
//!
//! Operations that take well under a microsecond (an 8-byte put is a handful of
//! nanoseconds) cannot be timed one by one: `Instant::now` itself costs tens of nanoseconds.
//! Those are timed in batches of `batch` back-to-back calls, and each batch contributes one
//! sample, its time divided by `batch`. Everything else is timed per iteration.

use std::sync::OnceLock;
use std::time::Instant;

/// Per-operation times of one measurement, in nanoseconds, sorted ascending.
#[derive(Debug, Clone)]
pub(crate) struct Samples {
    ns: Vec<f64>,
}

impl Samples {
    /// Wrap raw per-operation times (nanoseconds); sorts them.
    pub(crate) fn from_ns(mut ns: Vec<f64>) -> Self {
        ns.sort_by(f64::total_cmp);
        Samples { ns }
    }

    /// Number of samples.
    pub(crate) fn len(&self) -> usize {
        self.ns.len()
    }

    /// The `p`-th percentile (nearest rank), in nanoseconds; NaN without samples.
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        let n = self.ns.len();
        if n == 0 {
            return f64::NAN;
        }
        // Nearest rank: the smallest sample with at least p% of the samples at or below it.
        let rank = (p / 100.0 * n as f64).ceil();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0 <= rank <= n
        let idx = (rank.max(1.0) as usize - 1).min(n - 1);
        self.ns[idx]
    }

    /// Median, in nanoseconds.
    pub(crate) fn p50(&self) -> f64 {
        self.percentile(50.0)
    }

    /// The median of per-operation samples read off a clock that advances in steps of
    /// `step` nanoseconds (see [`clock_step`]), interpolated within the step: the samples in
    /// the step around the nearest-rank median are taken as spread evenly over it (the median
    /// of grouped data). The start and end stamps of a sample fall at random points between
    /// the clock's ticks, so how the samples split between adjacent steps carries the
    /// sub-step position that the nearest-rank median rounds away. Without a step, the
    /// nearest-rank median.
    pub(crate) fn p50_within(&self, step: Option<f64>) -> f64 {
        let m = self.p50();
        let Some(q) = step.filter(|q| *q > 0.0) else {
            return m;
        };
        let (lo, hi) = (m - q / 2.0, m + q / 2.0);
        let below = self.ns.partition_point(|&v| v < lo);
        let within = self.ns.partition_point(|&v| v < hi) - below;
        if within == 0 {
            return m;
        }
        let half = self.ns.len() as f64 / 2.0;
        lo + (half - below as f64) / within as f64 * q
    }

    /// Arithmetic mean, in nanoseconds; NaN without samples.
    pub(crate) fn mean(&self) -> f64 {
        self.ns.iter().sum::<f64>() / self.ns.len() as f64
    }

    /// 99th percentile, in nanoseconds.
    pub(crate) fn p99(&self) -> f64 {
        self.percentile(99.0)
    }
}

/// Run `f(i)` for `warmup` untimed iterations, then `iters` timed ones; each timed
/// iteration is one sample. `f` gets the iteration index counted from 0 over both phases.
pub(crate) fn time_each<E>(
    warmup: usize,
    iters: usize,
    mut f: impl FnMut(usize) -> Result<(), E>,
) -> Result<Samples, E> {
    for i in 0..warmup {
        f(i)?;
    }
    let mut ns = Vec::with_capacity(iters);
    for i in warmup..warmup + iters {
        let t = Instant::now();
        f(i)?;
        ns.push(t.elapsed().as_nanos() as f64);
    }
    Ok(Samples::from_ns(ns))
}

/// Like [`time_each`], but every sample is a batch of `batch` calls, divided by `batch`.
/// `warmup` and `samples` count batches.
pub(crate) fn time_batched<E>(
    warmup: usize,
    samples: usize,
    batch: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<Samples, E> {
    let batch = batch.max(1);
    for _ in 0..warmup * batch {
        f()?;
    }
    let mut ns = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        for _ in 0..batch {
            f()?;
        }
        ns.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    Ok(Samples::from_ns(ns))
}

/// Which of a pair of interleaved operations [`time_paired`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The operation under test.
    Op,
    /// Its floor (a local memcpy of the same size).
    Floor,
}

/// Like [`time_batched`] for two operations at once: every sample of `f(Side::Op)` is
/// followed by one of `f(Side::Floor)`, so that both see the same machine conditions and
/// their ratio does not drift when a neighbour or the host briefly slows the memory system.
pub(crate) fn time_paired<E>(
    warmup: usize,
    samples: usize,
    batch: usize,
    mut f: impl FnMut(Side) -> Result<(), E>,
) -> Result<(Samples, Samples), E> {
    let batch = batch.max(1);
    for _ in 0..warmup * batch {
        f(Side::Op)?;
        f(Side::Floor)?;
    }
    let mut op = Vec::with_capacity(samples);
    let mut floor = Vec::with_capacity(samples);
    for _ in 0..samples {
        for (side, out) in [(Side::Op, &mut op), (Side::Floor, &mut floor)] {
            let t = Instant::now();
            for _ in 0..batch {
                f(side)?;
            }
            out.push(t.elapsed().as_nanos() as f64 / batch as f64);
        }
    }
    Ok((Samples::from_ns(op), Samples::from_ns(floor)))
}

/// The step in which this host's clock (`Instant`) advances, in nanoseconds, when it is
/// coarse enough to matter (4 to 50 ns; e.g. 10 ns where the TSC ticks at 100 MHz), else
/// `None`. Measured once per process: 4,000 clock differences across busy waits of varying
/// length; the step is the largest `q` for which at least 99% of them lie within 1 ns of a
/// multiple of `q` (a clock that resolves single nanoseconds gives no such `q`).
pub(crate) fn clock_step() -> Option<f64> {
    static STEP: OnceLock<Option<f64>> = OnceLock::new();
    *STEP.get_or_init(|| {
        let mut deltas = Vec::with_capacity(4000);
        for i in 0..4000u64 {
            let t = Instant::now();
            let mut x = 0u64;
            for j in 0..i % 61 {
                x = std::hint::black_box(x.wrapping_add(j));
            }
            std::hint::black_box(x);
            deltas.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        step_of(&deltas)
    })
}

/// The largest `q` in 4..=50 for which at least 99% of `deltas` lie within 1 of a multiple
/// of `q`; `None` when there is none.
fn step_of(deltas: &[u64]) -> Option<f64> {
    (4..=50u64).rev().find_map(|q| {
        let near = deltas
            .iter()
            .filter(|&&d| {
                let r = d % q;
                r <= 1 || r + 1 >= q
            })
            .count();
        (near * 100 >= deltas.len() * 99).then_some(q as f64)
    })
}

/// What an empty timed iteration measures: the overhead [`time_each`] adds to every sample.
pub(crate) fn timer_overhead(samples: usize) -> Samples {
    let r: Result<Samples, ()> = time_each(samples / 10, samples, |i| {
        std::hint::black_box(i);
        Ok(())
    });
    r.unwrap_or_else(|()| Samples::from_ns(Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let s = Samples::from_ns((1..=100).rev().map(f64::from).collect());
        assert_eq!(s.len(), 100);
        assert_eq!(s.p50(), 50.0);
        assert_eq!(s.p99(), 99.0);
        assert_eq!(s.mean(), 50.5);
        assert_eq!(s.percentile(100.0), 100.0);
        assert_eq!(s.percentile(0.0), 1.0);
        assert!(Samples::from_ns(Vec::new()).p50().is_nan());
        assert!(Samples::from_ns(Vec::new()).mean().is_nan());
    }

    #[test]
    fn median_within_a_clock_step() {
        // 30 samples one step below, 70 on the step: the median lies 2/7 of a step above the
        // step's lower edge.
        let mut ns = vec![130.0; 30];
        ns.extend(vec![140.0; 70]);
        let s = Samples::from_ns(ns);
        assert_eq!(s.p50(), 140.0);
        let m = s.p50_within(Some(10.0));
        assert!((m - (135.0 + 10.0 * 20.0 / 70.0)).abs() < 1e-9, "{m}");
        // Half and half: the edge between the two steps.
        let mut ns = vec![130.0; 50];
        ns.extend(vec![141.0; 50]);
        let s = Samples::from_ns(ns);
        assert!((s.p50_within(Some(10.0)) - 135.0).abs() < 1e-9);
        // Without a step, the nearest rank.
        assert_eq!(s.p50_within(None), s.p50());
        assert!(Samples::from_ns(Vec::new()).p50_within(Some(10.0)).is_nan());
    }

    #[test]
    fn clock_steps_are_recognized() {
        // A 10 ns clock with 1 ns of rounding either way.
        let coarse: Vec<u64> = (0..1000)
            .map(|i| 20 + 10 * (i % 9) + (i % 3 == 0) as u64)
            .collect();
        assert_eq!(step_of(&coarse), Some(10.0));
        let with_jitter: Vec<u64> = coarse.iter().map(|d| d - 1).collect();
        assert_eq!(step_of(&with_jitter), Some(10.0));
        // A nanosecond clock: differences of every value.
        let fine: Vec<u64> = (0..1000).map(|i| 20 + i % 97).collect();
        assert_eq!(step_of(&fine), None);
    }

    #[test]
    fn batched_divides() {
        let mut calls = 0usize;
        let s = time_batched::<()>(1, 5, 10, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 60);
        assert_eq!(s.len(), 5);
    }

    #[test]
    fn paired_alternates() {
        let mut seq = Vec::new();
        let (a, b) = time_paired::<()>(0, 2, 2, |side| {
            seq.push(side);
            Ok(())
        })
        .unwrap();
        assert_eq!((a.len(), b.len()), (2, 2));
        use Side::{Floor as F, Op as O};
        assert_eq!(seq, [O, O, F, F, O, O, F, F]);
    }
}
