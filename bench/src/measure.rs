//! Timing helpers: warm-up, per-iteration (or per-batch) timing and percentiles.
//!
//! Operations that take well under a microsecond (an 8-byte put is a handful of
//! nanoseconds) cannot be timed one by one: `Instant::now` itself costs tens of nanoseconds.
//! Those are timed in batches of `batch` back-to-back calls, and each batch contributes one
//! sample, its time divided by `batch`. Everything else is timed per iteration.

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
        assert_eq!(s.percentile(100.0), 100.0);
        assert_eq!(s.percentile(0.0), 1.0);
        assert!(Samples::from_ns(Vec::new()).p50().is_nan());
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
