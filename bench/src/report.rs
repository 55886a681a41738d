//! Results: rows, ratios against the floors, the targets, and the two output formats
//! (OSU-style tables or one JSON object per line).

use serde_json::{json, Value};

use crate::measure::Samples;

/// One measured point.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// Suite that measured it: `floor`, `am`, `rma` or `barrier`.
    pub(crate) suite: &'static str,
    /// Operation, e.g. `short_rtt` or `put_bw`.
    pub(crate) op: &'static str,
    /// Payload bytes (0 where there is none).
    pub(crate) bytes: usize,
    /// Median time per operation, nanoseconds. For rows of single timed operations on a
    /// clock that advances in coarse steps, interpolated within the step
    /// ([`Samples::p50_within`]); else the nearest-rank median.
    pub(crate) p50_ns: f64,
    /// The nearest-rank median, nanoseconds (equal to `p50_ns` where nothing was
    /// interpolated).
    pub(crate) p50_nearest_ns: f64,
    /// 99th percentile time per operation, nanoseconds.
    pub(crate) p99_ns: f64,
    /// Mean time per operation, nanoseconds (`None` for collective rows, which carry their
    /// own averages). The clock may tick in steps as coarse as 10 ns, which the percentiles
    /// inherit; the mean of many samples resolves finer.
    pub(crate) mean_ns: Option<f64>,
    /// Bandwidth at the median, 10^6 bytes per second (bandwidth ops only).
    pub(crate) mb_s: Option<f64>,
    /// Ratio to the floor or reference this row is judged against, if any.
    pub(crate) ratio: Option<f64>,
    /// Bandwidth of the memcpy floor timed interleaved with this row (bandwidth rows).
    pub(crate) floor_mb_s: Option<f64>,
    /// Timed samples behind the percentiles.
    pub(crate) samples: usize,
    /// Operations per sample (1, or the batch size of batched timing, or the window).
    pub(crate) per_sample: usize,
    /// Collectives only: the figures over ranks.
    pub(crate) coll: Option<CollFigs>,
}

/// What a collective row adds: the sync mode, the statistics over ranks and the message
/// count.
#[derive(Debug, Clone)]
pub(crate) struct CollFigs {
    /// The IN/OUT sync mode, e.g. `IN_ALLSYNC|OUT_ALLSYNC` (`selected`: the selector's pick
    /// among the algorithms measured before it, in `IN_ALLSYNC|OUT_ALLSYNC`).
    pub(crate) sync: &'static str,
    /// The algorithm that ran.
    pub(crate) alg: &'static str,
    /// Average over ranks of the per-rank mean latency, nanoseconds.
    pub(crate) avg_ns: f64,
    /// Smallest per-rank mean, nanoseconds.
    pub(crate) min_ns: f64,
    /// Largest per-rank mean, nanoseconds.
    pub(crate) max_ns: f64,
    /// AM requests sent per call, summed over ranks (NaN for a peer's rows).
    pub(crate) msgs: f64,
    /// The average latency over the peer's counterpart's at the same operation and size
    /// (MPI's, with the mpi feature on the mpi conduit), if one was measured.
    pub(crate) vs_peer: Option<f64>,
}

/// The p50 of samples of `per_sample` operations each: interpolated within the clock's step
/// for single operations ([`Samples::p50_within`]); batched samples (a batch's time over its
/// length) resolve below the step already and take the nearest-rank median.
fn p50_of(s: &Samples, per_sample: usize) -> f64 {
    let step = if per_sample == 1 {
        crate::measure::clock_step()
    } else {
        None
    };
    s.p50_within(step)
}

impl Row {
    /// A latency row (no bandwidth).
    pub(crate) fn latency(
        suite: &'static str,
        op: &'static str,
        bytes: usize,
        s: &Samples,
        per_sample: usize,
    ) -> Row {
        Row {
            suite,
            op,
            bytes,
            p50_ns: p50_of(s, per_sample),
            p50_nearest_ns: s.p50(),
            p99_ns: s.p99(),
            mean_ns: Some(s.mean()),
            mb_s: None,
            ratio: None,
            floor_mb_s: None,
            samples: s.len(),
            per_sample,
            coll: None,
        }
    }

    /// A collective row of the `coll` suite: `t` holds the average over ranks of the
    /// per-rank means, the average of the medians, the largest p99, and the smallest and
    /// largest mean (nanoseconds); `msgs` the requests per call summed over ranks. The
    /// bandwidth is `bytes` over the average latency.
    pub(crate) fn collective(
        op: &'static str,
        bytes: usize,
        sync: &'static str,
        alg: &'static str,
        t: [f64; 5],
        msgs: f64,
        samples: usize,
    ) -> Row {
        let [avg_ns, p50_ns, p99_ns, min_ns, max_ns] = t;
        Row {
            suite: "coll",
            op,
            bytes,
            p50_ns,
            p50_nearest_ns: p50_ns,
            p99_ns,
            mean_ns: None,
            mb_s: Some(bytes as f64 / avg_ns * 1e3),
            ratio: None,
            floor_mb_s: None,
            samples,
            per_sample: 1,
            coll: Some(CollFigs {
                sync,
                alg,
                avg_ns,
                min_ns,
                max_ns,
                msgs,
                vs_peer: None,
            }),
        }
    }

    /// A bandwidth row: `s` holds per-operation times of `bytes`-byte operations.
    pub(crate) fn bandwidth(
        suite: &'static str,
        op: &'static str,
        bytes: usize,
        s: &Samples,
        per_sample: usize,
    ) -> Row {
        let mut r = Row::latency(suite, op, bytes, s, per_sample);
        // bytes per nanosecond = 10^3 MB/s.
        r.mb_s = Some(bytes as f64 / r.p50_ns * 1e3);
        r
    }

    /// Attach the memcpy floor measured interleaved with this bandwidth row.
    pub(crate) fn with_floor(mut self, floor: &Samples) -> Row {
        // The paired floor was timed with this row's batch, so it takes the same median.
        self.floor_mb_s = Some(self.bytes as f64 / p50_of(floor, self.per_sample) * 1e3);
        self
    }
}

/// How a target compares a value with its limit.
#[derive(Debug, Clone, Copy)]
enum Cmp {
    AtMost,
    Below,
    AtLeast,
}

/// One performance target and how the run did against it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    name: &'static str,
    key: &'static str,
    bytes: usize,
    value: Option<f64>,
    unit: &'static str,
    cmp: Cmp,
    limit: f64,
}

impl Target {
    fn met(&self) -> Option<bool> {
        let v = self.value?;
        Some(match self.cmp {
            Cmp::AtMost => v <= self.limit,
            Cmp::Below => v < self.limit,
            Cmp::AtLeast => v >= self.limit,
        })
    }

    fn limit_text(&self) -> String {
        let op = match self.cmp {
            Cmp::AtMost => "<=",
            Cmp::Below => "<",
            Cmp::AtLeast => ">=",
        };
        format!("{op} {}", fmt_val(self.limit, self.unit))
    }
}

fn fmt_val(v: f64, unit: &str) -> String {
    match unit {
        "x" => format!("{v:.2}x"),
        _ => format!("{v:.1} {unit}"),
    }
}

/// The table of one collective: a line per size and sync mode.
fn coll_table(out: &mut String, rows: &[&Row]) {
    use std::fmt::Write;
    let peer = rows
        .iter()
        .any(|r| r.coll.as_ref().is_some_and(|c| c.vs_peer.is_some()));
    let _ = write!(
        out,
        "{:<9} {:<23} {:<20} {:>11} {:>11} {:>11} {:>11} {:>11} {:>7} {:>8} {:>7}",
        "# bytes",
        "sync",
        "algorithm",
        "avg us",
        "min us",
        "max us",
        "p50 us",
        "p99 us",
        "ratio",
        "msgs",
        "iters"
    );
    let _ = writeln!(out, "{}", if peer { "  vs peer" } else { "" });
    for r in rows {
        let Some(c) = &r.coll else { continue };
        let ratio = r.ratio.map_or("-".to_string(), |x| format!("{x:.3}"));
        let msgs = if c.msgs.is_nan() {
            "-".to_string()
        } else {
            format!("{:.1}", c.msgs)
        };
        let _ = write!(
            out,
            "{:<9} {:<23} {:<20} {:>11.2} {:>11.2} {:>11.2} {:>11.2} {:>11.2} {:>7} {:>8} {:>7}",
            r.bytes,
            c.sync,
            c.alg,
            c.avg_ns / 1e3,
            c.min_ns / 1e3,
            c.max_ns / 1e3,
            r.p50_ns / 1e3,
            r.p99_ns / 1e3,
            ratio,
            msgs,
            r.samples
        );
        let vs = match (peer, c.vs_peer) {
            (false, _) => String::new(),
            (true, None) => format!("{:>9}", "-"),
            (true, Some(x)) => format!("{x:>9.3}"),
        };
        let _ = writeln!(out, "{vs}");
    }
    let _ = writeln!(
        out,
        "# avg: mean over ranks of each rank's mean call time; min/max: extreme per-rank \
         means; p50: mean of the per-rank medians; p99: largest per-rank p99; ratio: avg over \
         IN_ALLSYNC|OUT_ALLSYNC at this size (with --alg all: over the first algorithm, \
         flat); msgs: AM requests per call, all ranks{}",
        if peer {
            "; vs peer: avg over the peer's (sync `peer`) at this size, timed call by call \
             with the reference row"
        } else {
            ""
        }
    );
}

/// Every row of a run, plus where it ran.
#[derive(Debug)]
pub(crate) struct Report {
    conduit: &'static str,
    ranks: u32,
    rows: Vec<Row>,
}

/// The size the bandwidth targets are judged at.
pub(crate) const TARGET_BYTES: usize = 1 << 20;

impl Report {
    /// An empty report for a job on `conduit` with `ranks` ranks.
    pub(crate) fn new(conduit: &'static str, ranks: u32) -> Report {
        Report {
            conduit,
            ranks,
            rows: Vec::new(),
        }
    }

    /// Add rows.
    pub(crate) fn extend(&mut self, rows: impl IntoIterator<Item = Row>) {
        self.rows.extend(rows);
    }

    fn find(&self, op: &str, bytes: Option<usize>) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.op == op && bytes.is_none_or(|b| r.bytes == b))
    }

    fn p50(&self, op: &str, bytes: Option<usize>) -> Option<f64> {
        self.find(op, bytes).map(|r| r.p50_ns)
    }

    /// True when the udp floors and targets apply.
    fn udp(&self) -> bool {
        self.conduit == "udp"
    }

    /// True when the raw MPI floors and the mpi targets apply.
    fn mpi(&self) -> bool {
        self.conduit == "mpi"
    }

    /// True when the raw libfabric floor and the ofi targets apply.
    fn ofi(&self) -> bool {
        self.conduit == "ofi"
    }

    /// True when the raw verbs floor and the ibv targets apply.
    fn ibv(&self) -> bool {
        self.conduit == "ibv"
    }

    /// Fill in each row's ratio: Short RTT against the cache-line floor, Medium and Long RTT
    /// against Short, bandwidths against memcpy at the same size. On udp: Short RTT and the
    /// 8-byte put/get latencies against the raw UDP ping-pong, bandwidths against raw UDP
    /// streaming at the same size.
    pub(crate) fn compute_ratios(&mut self) {
        self.compute_coll_ratios();
        self.compute_conduit_ratios();
        // One strided tile put against the 64 row puts timed with it (lower is better).
        if let Some(rows) = self.p50("row_puts_tile", None) {
            for r in &mut self.rows {
                if r.op == "strided_tile_put" {
                    r.ratio = Some(r.p50_ns / rows);
                }
            }
        }
    }

    /// The point-to-point rows against the conduit's floors.
    fn compute_conduit_ratios(&mut self) {
        if self.udp() {
            self.compute_udp_ratios();
            return;
        }
        if self.mpi() {
            self.compute_mpi_ratios();
            return;
        }
        if self.ofi() {
            // Short RTT and 8-byte put/get against the raw tagged ping-pong; bandwidths
            // against raw blocking `fi_write`s at the same size (gets against `fi_read`s
            // where those were timed).
            self.compute_network_ratios("raw_ofi_rtt", None, None, "raw_ofi_write");
            // The get sweep against the raw read where one was timed at that size.
            let reads: Vec<(usize, f64)> = self
                .rows
                .iter()
                .filter(|r| r.op == "raw_ofi_read")
                .filter_map(|r| r.mb_s.map(|m| (r.bytes, m)))
                .collect();
            for r in &mut self.rows {
                if r.op == "get_bw" {
                    if let Some(&(_, m)) = reads.iter().find(|(b, _)| *b == r.bytes) {
                        r.ratio = r.mb_s.map(|v| v / m);
                    }
                }
            }
            // The put and get timed alternately with the raw write and read: against them.
            for r in &mut self.rows {
                if r.op == "put_bw_paired" || r.op == "get_bw_paired" {
                    r.ratio = r.mb_s.zip(r.floor_mb_s).map(|(v, f)| v / f);
                }
            }
            return;
        }
        if self.ibv() {
            // Short RTT and 8-byte put/get against the raw verbs ping-pong.
            self.compute_network_ratios("raw_ibv_rtt", None, None, "raw_ibv_write");
            return;
        }
        let floor = self.p50("cacheline_rtt", None);
        let short = self.p50("short_rtt", None);
        let memcpy: Vec<(usize, f64)> = self
            .rows
            .iter()
            .filter(|r| r.op == "memcpy_bw")
            .filter_map(|r| r.mb_s.map(|m| (r.bytes, m)))
            .collect();
        for r in &mut self.rows {
            if r.coll.is_some() {
                continue;
            }
            r.ratio = match r.op {
                "short_rtt" | "fetch_add_rtt" | "compare_swap_rtt" | "team_barrier" => {
                    floor.map(|f| r.p50_ns / f)
                }
                "medium_rtt" | "long_rtt" => short.map(|s| r.p50_ns / s),
                "put_bw" | "get_bw" | "long_bw" | "medium_bw" => {
                    // The interleaved floor when there is one, else the floor sweep.
                    let m = r
                        .floor_mb_s
                        .or_else(|| memcpy.iter().find(|(b, _)| *b == r.bytes).map(|&(_, m)| m));
                    r.mb_s.zip(m).map(|(v, m)| v / m)
                }
                _ => None,
            };
        }
    }

    /// Collectives: the average latency over IN_ALLSYNC|OUT_ALLSYNC (the first row of that
    /// label: under `--alg all` the first algorithm) at the same op and size, and over the
    /// peer's counterpart where one was measured.
    fn compute_coll_ratios(&mut self) {
        let by_label = |rows: &[Row], label: &str| -> Vec<(&'static str, usize, f64)> {
            rows.iter()
                .filter_map(|r| {
                    let c = r.coll.as_ref()?;
                    (c.sync == label).then_some((r.op, r.bytes, c.avg_ns))
                })
                .collect()
        };
        let reference = by_label(&self.rows, crate::coll::REFERENCE_SYNC);
        let peer = by_label(&self.rows, crate::coll::PEER_SYNC);
        let at = |v: &[(&'static str, usize, f64)], op: &str, bytes: usize| {
            v.iter()
                .find(|(o, b, _)| *o == op && *b == bytes)
                .map(|&(_, _, a)| a)
        };
        for r in &mut self.rows {
            let (op, bytes) = (r.op, r.bytes);
            let Some(c) = r.coll.as_mut() else { continue };
            if c.sync == crate::coll::FLOOR_SYNC {
                continue;
            }
            r.ratio = at(&reference, op, bytes).map(|a| c.avg_ns / a);
            if c.sync != crate::coll::PEER_SYNC {
                c.vs_peer = at(&peer, op, bytes).map(|a| c.avg_ns / a);
            }
        }
    }

    /// The median latency of the collective row `op` at `bytes` under `sync` (the ranks'
    /// average).
    fn coll_p50(&self, op: &str, bytes: usize, sync: &str) -> Option<f64> {
        self.rows.iter().find_map(|r| {
            let c = r.coll.as_ref()?;
            (r.op == op && r.bytes == bytes && c.sync == sync).then_some(r.p50_ns)
        })
    }

    /// The collectives' targets where the run measured them: broadcast bandwidth
    /// (IN_MYSYNC|OUT_MYSYNC) over the memcpy floor timed interleaved with it, at 64 KiB and
    /// 1 MiB, medians (a copy's average carries the rare page or cache misses of its first
    /// calls).
    fn coll_targets(&self) -> Vec<Target> {
        let bw = |name, key, bytes| {
            let floor = self.coll_p50("broadcast", bytes, crate::coll::FLOOR_SYNC)?;
            let call = self.coll_p50("broadcast", bytes, crate::coll::FLOOR_PAIRED_SYNC)?;
            Some(Target {
                name,
                key,
                bytes,
                value: Some(floor / call),
                unit: "x",
                cmp: Cmp::AtLeast,
                limit: 0.8,
            })
        };
        [
            bw(
                "broadcast BW (64 KiB) / memcpy BW (64 KiB)",
                "broadcast_bw_vs_memcpy_64k",
                64 << 10,
            ),
            bw(
                "broadcast BW (1 MiB) / memcpy BW (1 MiB)",
                "broadcast_bw_vs_memcpy",
                TARGET_BYTES,
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn compute_udp_ratios(&mut self) {
        self.compute_network_ratios("raw_udp_rtt", None, None, "raw_udp_stream_bw");
    }

    /// mpi: Short RTT against the raw MPI ping-pong, 8-byte put/get against raw
    /// `MPI_Put` + flush, bandwidths against raw MPI messages of the same size, the barrier
    /// against `MPI_Barrier`.
    fn compute_mpi_ratios(&mut self) {
        self.compute_network_ratios(
            "raw_mpi_rtt",
            Some("raw_mpi_put_lat"),
            Some("raw_mpi_barrier"),
            "raw_mpi_bw",
        );
        // The conduit's MPI calls without amnet, against the plain ping-pong: what of the
        // Short round trip's ratio the design leaves to MPI.
        let raw = self.p50("raw_mpi_rtt", None);
        for r in self.rows.iter_mut().filter(|r| r.op == "raw_mpi_am_rtt") {
            r.ratio = raw.map(|f| r.p50_ns / f);
        }
        // The atomic round trips against MPI's own atomics plus flush.
        let fadd = self.p50("raw_mpi_fetch_add_lat", None);
        let cas = self.p50("raw_mpi_cas_lat", None);
        for r in &mut self.rows {
            let raw = match r.op {
                "fetch_add_rtt" => fadd,
                "compare_swap_rtt" => cas,
                _ => continue,
            };
            r.ratio = raw.map(|f| r.p50_ns / f);
        }
    }

    /// Ratios against a network conduit's raw floors: Short RTT against the raw round trip
    /// `rtt`; 8-byte put/get against `put` (else `rtt`); the barrier against `barrier`;
    /// Medium/Long RTT against Short; bandwidths against raw transfers (`bw`) of the same
    /// size.
    fn compute_network_ratios(
        &mut self,
        rtt: &str,
        put: Option<&str>,
        barrier: Option<&str>,
        bw: &str,
    ) {
        let rtt = self.p50(rtt, None);
        let put = put.map_or(rtt, |p| self.p50(p, None));
        let bar = barrier.and_then(|b| self.p50(b, None));
        let short = self.p50("short_rtt", None);
        let raw_bw: Vec<(usize, f64)> = self
            .rows
            .iter()
            .filter(|r| r.op == bw)
            .filter_map(|r| r.mb_s.map(|m| (r.bytes, m)))
            .collect();
        for r in &mut self.rows {
            if r.coll.is_some() {
                continue;
            }
            r.ratio = match r.op {
                "short_rtt" | "fetch_add_rtt" | "compare_swap_rtt" => rtt.map(|f| r.p50_ns / f),
                "put_lat" | "get_lat" => put.map(|f| r.p50_ns / f),
                "barrier" | "team_barrier" => bar.map(|f| r.p50_ns / f),
                "medium_rtt" | "long_rtt" => short.map(|s| r.p50_ns / s),
                "put_bw" | "get_bw" | "long_bw" | "medium_bw" => {
                    let m = raw_bw.iter().find(|(b, _)| *b == r.bytes).map(|&(_, m)| m);
                    r.mb_s.zip(m).map(|(v, m)| v / m)
                }
                _ => None,
            };
        }
    }

    /// A target on the ratio already computed for `op` at `bytes` (0: any size).
    fn ratio_target(
        &self,
        name: &'static str,
        key: &'static str,
        op: &str,
        bytes: usize,
        cmp: Cmp,
        limit: f64,
    ) -> Target {
        Target {
            name,
            key,
            bytes,
            value: self.ratio(op, if bytes == 0 { None } else { Some(bytes) }),
            unit: "x",
            cmp,
            limit,
        }
    }

    /// The mpi targets, against the raw MPI floors of the same run.
    fn mpi_targets(&self) -> Vec<Target> {
        let ratio =
            |name, key, op, bytes, cmp, limit| self.ratio_target(name, key, op, bytes, cmp, limit);
        vec![
            ratio(
                "Short RTT / raw MPI send/recv RTT",
                "short_rtt_vs_raw_mpi",
                "short_rtt",
                0,
                Cmp::AtMost,
                1.3,
            ),
            ratio(
                "blocking put (8 B) / raw MPI_Put+flush",
                "put_lat_vs_raw_mpi",
                "put_lat",
                8,
                Cmp::AtMost,
                1.5,
            ),
            ratio(
                "Long BW (1 MiB) / raw MPI BW",
                "long_bw_vs_raw_mpi",
                "long_bw",
                TARGET_BYTES,
                Cmp::AtLeast,
                0.9,
            ),
            ratio(
                "put BW (1 MiB) / raw MPI BW",
                "put_bw_vs_raw_mpi",
                "put_bw",
                TARGET_BYTES,
                Cmp::AtLeast,
                0.9,
            ),
        ]
    }

    fn ratio(&self, op: &str, bytes: Option<usize>) -> Option<f64> {
        self.find(op, bytes).and_then(|r| r.ratio)
    }

    /// The targets, judged on medians. A target whose inputs this run did not measure has no
    /// value.
    pub(crate) fn targets(&self) -> Vec<Target> {
        let mut v = self.conduit_targets();
        v.extend(self.barrier_targets());
        v.extend(self.coll_targets());
        v
    }

    /// The collectives' team barrier (medians) against `MPI_Barrier` on the mpi conduit and,
    /// on smp in a 2-rank job, the cache-line round trip between the two (with more ranks,
    /// ranks 0 and 1 may share a core and the round trip is no floor), where the run measured
    /// them.
    fn barrier_targets(&self) -> Vec<Target> {
        let Some(team) = self.p50("team_barrier", None) else {
            return Vec::new();
        };
        let over = |floor: &str, name, key, limit| {
            Some(Target {
                name,
                key,
                bytes: 0,
                value: Some(team / self.p50(floor, None)?),
                unit: "x",
                cmp: Cmp::AtMost,
                limit,
            })
        };
        let mpi = over(
            "raw_mpi_barrier",
            "team barrier / MPI_Barrier",
            "team_barrier_vs_mpi",
            0.85,
        );
        // The cache-line floor judges the shared-memory conduit only: over a network the
        // barrier's floor is the network's round trip, not a cache line's.
        let line = (self.ranks == 2 && self.conduit == "smp")
            .then(|| {
                over(
                    "cacheline_rtt",
                    "team barrier / cache-line floor RTT",
                    "team_barrier_vs_floor",
                    1.5,
                )
            })
            .flatten();
        [line, mpi].into_iter().flatten().collect()
    }

    /// The conduit's point-to-point targets.
    fn conduit_targets(&self) -> Vec<Target> {
        // A conduit through the host-local bypass is judged against the smp conduit's run
        // (RESULTS), not against a floor of its own job.
        if self.conduit.ends_with("+bypass") {
            return Vec::new();
        }
        if self.udp() {
            return self.udp_targets();
        }
        if self.mpi() {
            return self.mpi_targets();
        }
        if self.ofi() {
            return vec![
                self.ratio_target(
                    "Short RTT / raw tagged ping-pong RTT",
                    "short_rtt_vs_raw_ofi",
                    "short_rtt",
                    0,
                    Cmp::AtMost,
                    1.2,
                ),
                self.ratio_target(
                    "put BW (1 MiB) / raw fi_write BW (1 MiB)",
                    "put_bw_vs_raw_ofi_write",
                    "put_bw_paired",
                    TARGET_BYTES,
                    Cmp::AtLeast,
                    0.8,
                ),
            ];
        }
        if self.ibv() {
            return vec![self.ratio_target(
                "Short RTT / raw verbs ping-pong RTT",
                "short_rtt_vs_raw_ibv",
                "short_rtt",
                0,
                Cmp::AtMost,
                1.3,
            )];
        }
        let tb = Some(TARGET_BYTES);
        let t = |name, key, bytes, value, unit, cmp, limit| Target {
            name,
            key,
            bytes,
            value,
            unit,
            cmp,
            limit,
        };
        let floor = self.p50("cacheline_rtt", None);
        let short = self.p50("short_rtt", None);
        let over_short = |op: &str| {
            let v = self.p50(op, Some(8))?;
            Some(v / short?)
        };
        vec![
            t(
                "Short RTT / cache-line floor RTT",
                "short_rtt_vs_floor",
                0,
                short.and_then(|s| Some(s / floor?)),
                "x",
                Cmp::AtMost,
                1.8,
            ),
            t(
                "Medium RTT (8 B) / Short RTT",
                "medium_rtt_vs_short",
                8,
                over_short("medium_rtt"),
                "x",
                Cmp::AtMost,
                1.1,
            ),
            t(
                "Long RTT (8 B) / Short RTT",
                "long_rtt_vs_short",
                8,
                over_short("long_rtt"),
                "x",
                Cmp::AtMost,
                1.1,
            ),
            t(
                "blocking put, 8 B",
                "put_lat_8",
                8,
                self.p50("put_lat", Some(8)),
                "ns",
                Cmp::Below,
                20.0,
            ),
            t(
                "blocking get, 8 B",
                "get_lat_8",
                8,
                self.p50("get_lat", Some(8)),
                "ns",
                Cmp::Below,
                20.0,
            ),
            t(
                "put BW (1 MiB) / memcpy BW (1 MiB)",
                "put_bw_vs_memcpy",
                TARGET_BYTES,
                self.ratio("put_bw", tb),
                "x",
                Cmp::AtLeast,
                0.9,
            ),
            t(
                "get BW (1 MiB) / memcpy BW (1 MiB)",
                "get_bw_vs_memcpy",
                TARGET_BYTES,
                self.ratio("get_bw", tb),
                "x",
                Cmp::AtLeast,
                0.9,
            ),
            t(
                "Long BW (1 MiB) / memcpy BW (1 MiB)",
                "long_bw_vs_memcpy",
                TARGET_BYTES,
                self.ratio("long_bw", tb),
                "x",
                Cmp::AtLeast,
                0.9,
            ),
            t(
                "atomic fetch-add RTT / cache-line floor RTT",
                "fetch_add_vs_floor",
                8,
                self.ratio("fetch_add_rtt", Some(8)),
                "x",
                Cmp::AtMost,
                1.5,
            ),
        ]
    }

    /// The udp targets: against the raw UDP floors measured in the same run (ratios as
    /// filled in by [`Report::compute_ratios`]).
    fn udp_targets(&self) -> Vec<Target> {
        let ratio =
            |name, key, op, bytes, cmp, limit| self.ratio_target(name, key, op, bytes, cmp, limit);
        vec![
            ratio(
                "Short RTT / raw UDP RTT",
                "short_rtt_vs_raw_udp",
                "short_rtt",
                0,
                Cmp::AtMost,
                1.1,
            ),
            ratio(
                "blocking put (8 B) / raw UDP RTT",
                "put_lat_vs_raw_udp",
                "put_lat",
                8,
                Cmp::AtMost,
                1.2,
            ),
            ratio(
                "blocking get (8 B) / raw UDP RTT",
                "get_lat_vs_raw_udp",
                "get_lat",
                8,
                Cmp::AtMost,
                1.2,
            ),
            ratio(
                "Long BW (1 MiB) / raw UDP stream BW",
                "long_bw_vs_raw_udp",
                "long_bw",
                TARGET_BYTES,
                Cmp::AtLeast,
                0.7,
            ),
            ratio(
                "put BW (1 MiB) / raw UDP stream BW",
                "put_bw_vs_raw_udp",
                "put_bw",
                TARGET_BYTES,
                Cmp::AtLeast,
                0.7,
            ),
            ratio(
                "atomic fetch-add RTT / raw UDP RTT",
                "fetch_add_vs_raw_udp",
                "fetch_add_rtt",
                8,
                Cmp::AtMost,
                1.15,
            ),
            ratio(
                "strided 64x64 f64 tile put / 64 row puts",
                "strided_tile_vs_row_puts",
                "strided_tile_put",
                0,
                Cmp::AtMost,
                0.1,
            ),
        ]
    }

    /// The report as OSU-style tables, one per operation, then the targets.
    pub(crate) fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        if let Some(q) = crate::measure::clock_step() {
            let _ = writeln!(
                out,
                "# the clock advances in {q} ns steps here: the p50 of rows timed one operation \
                 per sample is interpolated within the step (--json also gives the \
                 nearest-rank p50 and the mean)\n"
            );
        }
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for r in &self.rows {
            if !seen.contains(&(r.suite, r.op)) {
                seen.push((r.suite, r.op));
            }
        }
        for (suite, op) in seen {
            let rows: Vec<&Row> = self
                .rows
                .iter()
                .filter(|r| r.suite == suite && r.op == op)
                .collect();
            let _ = writeln!(
                out,
                "# amnet-bench {suite}/{op} (conduit {}, {} ranks)",
                self.conduit, self.ranks
            );
            if rows.iter().any(|r| r.coll.is_some()) {
                coll_table(&mut out, &rows);
                out.push('\n');
                continue;
            }
            let _ = writeln!(
                out,
                "{:<10} {:>12} {:>12} {:>12} {:>8} {:>14}",
                "# bytes", "p50 us", "p99 us", "MB/s", "ratio", "samples x ops"
            );
            let rows_have_floor = rows.iter().any(|r| r.floor_mb_s.is_some());
            for r in rows {
                let mb = r.mb_s.map_or("-".to_string(), |m| format!("{m:.1}"));
                let ratio = r.ratio.map_or("-".to_string(), |x| format!("{x:.3}"));
                let _ = writeln!(
                    out,
                    "{:<10} {:>12.4} {:>12.4} {:>12} {:>8} {:>14}",
                    r.bytes,
                    r.p50_ns / 1e3,
                    r.p99_ns / 1e3,
                    mb,
                    ratio,
                    format!("{}x{}", r.samples, r.per_sample)
                );
            }
            if self.udp() && rows_have_floor {
                let _ = writeln!(
                    out,
                    "# ratio: MB/s over raw UDP streaming of the same size (floor/raw_udp_stream_bw)"
                );
            } else if self.ofi() && rows_have_floor {
                let raw = if op == "get_bw_paired" {
                    "fi_read"
                } else {
                    "fi_write"
                };
                let _ = writeln!(
                    out,
                    "# ratio: MB/s over a raw blocking {raw} of the same size timed interleaved with it"
                );
            } else if rows_have_floor {
                let _ = writeln!(
                    out,
                    "# ratio: MB/s over a memcpy of the same size timed interleaved with it"
                );
            }
            out.push('\n');
        }
        let targets = self.targets();
        let _ = writeln!(out, "# targets (medians)");
        let _ = writeln!(
            out,
            "{:<38} {:>12} {:>12}  status",
            "# target", "measured", "goal"
        );
        let unmeasured = targets.iter().filter(|t| t.value.is_none()).count();
        for t in &targets {
            let (v, status) = match (t.value, t.met()) {
                (Some(v), Some(true)) => (fmt_val(v, t.unit), "MET"),
                (Some(v), _) => (fmt_val(v, t.unit), "MISSED"),
                (None, _) => continue,
            };
            let _ = writeln!(
                out,
                "{:<38} {:>12} {:>12}  {status}",
                t.name,
                v,
                t.limit_text()
            );
        }
        if unmeasured > 0 {
            let _ = writeln!(
                out,
                "# ({unmeasured} of {} targets need suites this run did not include)",
                targets.len()
            );
        }
        out
    }

    /// The report as JSON objects, one per line: every row, then every target.
    pub(crate) fn json_lines(&self) -> Vec<String> {
        // Rounded to well below the timer's resolution: microseconds to 10 ps, MB/s to
        // 0.1, ratios to 1e-4.
        let round = |v: f64, digits: i32| {
            let k = 10f64.powi(digits);
            (v * k).round() / k
        };
        let us = |ns: f64| Value::from(round(ns / 1e3, 5));
        let opt =
            |v: Option<f64>, digits: i32| v.map_or(Value::Null, |x| Value::from(round(x, digits)));
        let mut lines: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                let mut o = json!({
                    "suite": r.suite,
                    "op": r.op,
                    "conduit": self.conduit,
                    "ranks": self.ranks,
                    "bytes": r.bytes,
                    "p50_us": us(r.p50_ns),
                    "p50_nearest_us": us(r.p50_nearest_ns),
                    "p99_us": us(r.p99_ns),
                    "mean_us": r.mean_ns.map_or(Value::Null, us),
                    "mb_s": opt(r.mb_s, 1),
                    "memcpy_mb_s": opt(r.floor_mb_s, 1),
                    "samples": r.samples,
                    "ops_per_sample": r.per_sample,
                });
                if let Some(x) = r.ratio {
                    o["ratio"] = Value::from(round(x, 4));
                }
                if let Some(c) = &r.coll {
                    o["sync"] = Value::from(c.sync);
                    o["algorithm"] = Value::from(c.alg);
                    o["avg_us"] = us(c.avg_ns);
                    o["min_us"] = us(c.min_ns);
                    o["max_us"] = us(c.max_ns);
                    if !c.msgs.is_nan() {
                        o["msgs"] = Value::from(round(c.msgs, 2));
                    }
                    if let Some(x) = c.vs_peer {
                        o["vs_peer"] = Value::from(round(x, 4));
                    }
                }
                o.to_string()
            })
            .collect();
        for t in self.targets() {
            let o = json!({
                "suite": "targets",
                "op": t.key,
                "conduit": self.conduit,
                "ranks": self.ranks,
                "bytes": t.bytes,
                "p50_us": Value::Null,
                "p99_us": Value::Null,
                "mb_s": Value::Null,
                "ratio": if t.unit == "x" { opt(t.value, 4) } else { Value::Null },
                "value": opt(t.value, 4),
                "unit": t.unit,
                "goal": t.limit_text(),
                "met": t.met(),
            });
            lines.push(o.to_string());
        }
        lines
    }
}

/// The 2-core VM's fast state (bench/RESULTS.md, "The 2-core VM's fast and slow states"): a
/// round is fast when its round-trip floor is below this, in ns, for the floor row named.
const FAST_FLOORS: [(&str, f64); 3] = [
    ("cacheline_rtt", 200.0),
    ("raw_udp_rtt", 5600.0),
    ("raw_mpi_rtt", 800.0),
];

impl Report {
    /// Whether this round ran in the machine's fast state, judged by its round-trip floor
    /// (`None` where it measured none): the floor row and its p50 in ns too.
    fn fast_state(&self) -> Option<(bool, &'static str, f64)> {
        FAST_FLOORS.iter().find_map(|&(op, limit)| {
            let v = self.p50(op, None)?;
            Some((v < limit, op, v))
        })
    }
}

/// The value at fraction `q` (0 to 1) of sorted `v` (nearest rank), or the median (the mean
/// of the two middle values for an even count) where `q` is 0.5.
fn quantile(v: &[f64], q: f64) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if (q - 0.5).abs() < f64::EPSILON {
        return if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )] // n is a small count; the rank is in 1..=n
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    v[rank - 1]
}

/// One target over the rounds of a `--rounds` run.
#[derive(Debug, Clone)]
pub(crate) struct RoundsSummary {
    /// The target (its value is the median over every round).
    target: Target,
    /// Its value per round, in round order (`None` where a round did not measure it).
    values: Vec<Option<f64>>,
    /// Per round: whether it ran in the fast state.
    fast: Vec<bool>,
}

impl RoundsSummary {
    fn sorted(&self, only_fast: bool) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .values
            .iter()
            .zip(&self.fast)
            .filter(|(_, &f)| f || !only_fast)
            .filter_map(|(v, _)| *v)
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }

    /// (median, 10th percentile, 90th percentile) over the rounds (over the fast rounds with
    /// `only_fast`), `None` without values.
    fn spread(&self, only_fast: bool) -> Option<(f64, f64, f64)> {
        let v = self.sorted(only_fast);
        if v.is_empty() {
            return None;
        }
        Some((quantile(&v, 0.5), quantile(&v, 0.1), quantile(&v, 0.9)))
    }

    /// Rounds whose value met the target.
    fn met_rounds(&self) -> usize {
        self.values
            .iter()
            .filter(|v| {
                let mut t = self.target.clone();
                t.value = **v;
                t.met() == Some(true)
            })
            .count()
    }
}

/// Every target over `rounds` (reports of one job, ratios computed), judged on the median
/// over the rounds.
pub(crate) fn rounds_summary(rounds: &[Report]) -> Vec<RoundsSummary> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    let fast: Vec<bool> = rounds
        .iter()
        .map(|r| r.fast_state().is_some_and(|f| f.0))
        .collect();
    let per_round: Vec<Vec<Target>> = rounds.iter().map(Report::targets).collect();
    first
        .targets()
        .into_iter()
        .enumerate()
        .map(|(i, mut target)| {
            let values: Vec<Option<f64>> = per_round
                .iter()
                .map(|ts| ts.get(i).and_then(|t| t.value))
                .collect();
            let mut s = RoundsSummary {
                target: target.clone(),
                values,
                fast: fast.clone(),
            };
            target.value = s.spread(false).map(|x| x.0);
            s.target = target;
            s
        })
        .collect()
}

/// The `--rounds` section: each round's floor and state, then per target the median over the
/// rounds with its 10th-90th percentile range, the same over the fast rounds, and how many
/// rounds met it.
pub(crate) fn rounds_table(rounds: &[Report]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let n = rounds.len();
    let states: Vec<Option<(bool, &str, f64)>> = rounds.iter().map(Report::fast_state).collect();
    let nfast = states.iter().filter(|s| s.is_some_and(|f| f.0)).count();
    let floor = states.iter().flatten().next().map_or("-", |s| s.1);
    let limit = FAST_FLOORS
        .iter()
        .find(|f| f.0 == floor)
        .map_or(f64::NAN, |f| f.1);
    let _ = writeln!(
        out,
        "# rounds: {n}, {nfast} in the fast state ({floor} below {limit:.0} ns)"
    );
    let _ = write!(out, "# {floor} per round (ns):");
    for s in &states {
        let _ = match s {
            Some((f, _, v)) => write!(out, " {v:.0}{}", if *f { "" } else { "*" }),
            None => write!(out, " -"),
        };
    }
    let _ = writeln!(out, "  (* slow)");
    let _ = writeln!(
        out,
        "# {:<40} {:>9} {:>19} {:>9} {:>19} {:>10} {:>11}",
        "target", "median", "p10-p90", "fast med", "fast p10-p90", "met", "goal"
    );
    let cell = |x: Option<(f64, f64, f64)>, unit: &str| match x {
        None => ("-".to_string(), "-".to_string()),
        Some((m, lo, hi)) => (
            fmt_val(m, unit),
            format!("{}-{}", fmt_val(lo, unit), fmt_val(hi, unit)),
        ),
    };
    for s in rounds_summary(rounds) {
        let (m, r) = cell(s.spread(false), s.target.unit);
        let (fm, fr) = cell(s.spread(true), s.target.unit);
        let _ = writeln!(
            out,
            "# {:<40} {:>9} {:>19} {:>9} {:>19} {:>10} {:>11}",
            s.target.name,
            m,
            r,
            fm,
            fr,
            if s.values.iter().all(Option::is_none) {
                "-".to_string()
            } else {
                format!("{}/{n}", s.met_rounds())
            },
            s.target.limit_text()
        );
    }
    out
}

/// The `--rounds` section as JSON lines: one object per round (its floor and state) and one
/// per target (`suite` "rounds").
pub(crate) fn rounds_json(rounds: &[Report]) -> Vec<String> {
    let r4 = |v: f64| (v * 1e4).round() / 1e4;
    let mut lines = Vec::new();
    for (i, r) in rounds.iter().enumerate() {
        let st = r.fast_state();
        lines.push(
            json!({
                "suite": "round",
                "round": i,
                "conduit": r.conduit,
                "floor": st.map(|s| s.1),
                "floor_p50_us": st.map(|s| r4(s.2 / 1e3)),
                "fast": st.map(|s| s.0),
            })
            .to_string(),
        );
    }
    for s in rounds_summary(rounds) {
        let all = s.spread(false);
        let fast = s.spread(true);
        let opt = |x: Option<f64>| x.map_or(Value::Null, |v| Value::from(r4(v)));
        lines.push(
            json!({
                "suite": "rounds",
                "target": s.target.key,
                "conduit": rounds.first().map_or("", |r| r.conduit),
                "rounds": s.values.len(),
                "fast_rounds": s.fast.iter().filter(|&&f| f).count(),
                "median": opt(all.map(|x| x.0)),
                "p10": opt(all.map(|x| x.1)),
                "p90": opt(all.map(|x| x.2)),
                "fast_median": opt(fast.map(|x| x.0)),
                "fast_p10": opt(fast.map(|x| x.1)),
                "fast_p90": opt(fast.map(|x| x.2)),
                "met_rounds": s.met_rounds(),
                "goal": s.target.limit_text(),
                "values": s.values.iter().map(|v| opt(*v)).collect::<Vec<_>>(),
            })
            .to_string(),
        );
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(op: &'static str, bytes: usize, ns: f64, bw: bool) -> Row {
        let s = Samples::from_ns(vec![ns; 10]);
        if bw {
            Row::bandwidth("x", op, bytes, &s, 1)
        } else {
            Row::latency("x", op, bytes, &s, 1)
        }
    }

    #[test]
    fn ratios_and_targets() {
        let mut r = Report::new("smp", 2);
        r.extend([
            row("cacheline_rtt", 64, 100.0, false),
            row("short_rtt", 0, 150.0, false),
            row("medium_rtt", 8, 180.0, false),
            row("memcpy_bw", TARGET_BYTES, 100_000.0, true),
            row("put_bw", TARGET_BYTES, 105_000.0, true),
        ]);
        r.compute_ratios();
        let t = r.targets();
        assert_eq!(t[0].value, Some(1.5));
        assert_eq!(t[0].met(), Some(true));
        assert_eq!(t[1].met(), Some(false));
        assert_eq!(t[2].value, None);
        assert!(t[5].met().unwrap());
        let lines = r.json_lines();
        let v: Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(v["op"], "short_rtt");
        assert_eq!(v["ratio"], 1.5);
        assert!(v["mb_s"].is_null());
        assert!(r.table().contains("MISSED"));
    }

    /// The atomic round trips: against the cache-line floor on smp (a target), the raw UDP
    /// round trip on udp (a target), MPI's own atomics on mpi (a ratio).
    #[test]
    fn atomic_ratios_and_targets() {
        let key = |r: &Report, k: &str| r.targets().into_iter().find(|t| t.key == k);
        let mut r = Report::new("smp", 2);
        r.extend([
            row("cacheline_rtt", 64, 100.0, false),
            row("fetch_add_rtt", 8, 120.0, false),
            row("compare_swap_rtt", 8, 160.0, false),
        ]);
        r.compute_ratios();
        let t = key(&r, "fetch_add_vs_floor").unwrap();
        assert_eq!((t.value, t.met()), (Some(1.2), Some(true)));
        assert_eq!(r.rows[2].ratio, Some(1.6));
        let mut r = Report::new("udp", 2);
        r.extend([
            row("raw_udp_rtt", 8, 1000.0, false),
            row("fetch_add_rtt", 8, 1200.0, false),
        ]);
        r.compute_ratios();
        let t = key(&r, "fetch_add_vs_raw_udp").unwrap();
        assert_eq!((t.value, t.met()), (Some(1.2), Some(false)));
        let mut r = Report::new("mpi", 2);
        r.extend([
            row("raw_mpi_rtt", 8, 500.0, false),
            row("raw_mpi_fetch_add_lat", 8, 100.0, false),
            row("fetch_add_rtt", 8, 300.0, false),
            row("compare_swap_rtt", 8, 300.0, false),
        ]);
        r.compute_ratios();
        assert_eq!(r.rows[2].ratio, Some(3.0), "against MPI_Fetch_and_op");
        assert_eq!(r.rows[3].ratio, None, "no MPI_Compare_and_swap row");
    }

    /// The strided tile against the row puts timed with it, on every conduit; a target on udp.
    #[test]
    fn strided_tile_ratio_and_target() {
        for conduit in ["smp", "udp", "mpi"] {
            let mut r = Report::new(conduit, 2);
            r.extend([
                row("strided_tile_put", 32768, 50.0, true),
                row("row_puts_tile", 32768, 1000.0, true),
            ]);
            r.compute_ratios();
            assert_eq!(r.rows[0].ratio, Some(0.05), "{conduit}");
            let t = r
                .targets()
                .into_iter()
                .find(|t| t.key == "strided_tile_vs_row_puts");
            assert_eq!(
                t.and_then(|t| t.met()),
                (conduit == "udp").then_some(true),
                "{conduit}"
            );
        }
    }

    /// The broadcast bandwidth targets: the memcpy floor's median over the MYSYNC
    /// broadcast's, only where both were measured; the floor rows get no ratios.
    #[test]
    fn broadcast_bandwidth_targets() {
        let coll = |bytes, sync, p50: f64| {
            Row::collective(
                "broadcast",
                bytes,
                sync,
                "x",
                [p50 * 1.5, p50, p50, p50, p50],
                0.0,
                20,
            )
        };
        let mut r = Report::new("smp", 2);
        r.extend([
            coll(64 << 10, crate::coll::REFERENCE_SYNC, 4000.0),
            coll(64 << 10, crate::coll::FLOOR_PAIRED_SYNC, 2000.0),
            coll(64 << 10, crate::coll::FLOOR_SYNC, 1800.0),
            coll(TARGET_BYTES, crate::coll::FLOOR_PAIRED_SYNC, 40_000.0),
        ]);
        r.compute_ratios();
        let t: Vec<Target> = r
            .targets()
            .into_iter()
            .filter(|t| t.key.starts_with("broadcast"))
            .collect();
        assert_eq!(t.len(), 1, "1 MiB has no floor row");
        assert_eq!(t[0].value, Some(0.9));
        assert_eq!(t[0].met(), Some(true));
        assert!(r.rows[2].ratio.is_none());
        assert!(r.rows[1].ratio.is_some());
    }

    #[test]
    fn quantiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(quantile(&v, 0.5), 5.5);
        assert_eq!(quantile(&v[..9], 0.5), 5.0);
        assert_eq!(quantile(&v, 0.1), 1.0);
        assert_eq!(quantile(&v, 0.9), 9.0);
        assert_eq!(quantile(&v[..1], 0.9), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn rounds_give_medians_spreads_and_the_fast_share() {
        // Short / floor per round: 1.5, 1.6, 2.0 (slow floor), 1.7.
        let rounds: Vec<Report> = [
            (100.0, 150.0),
            (100.0, 160.0),
            (400.0, 800.0),
            (100.0, 170.0),
        ]
        .iter()
        .map(|&(floor, short)| {
            let mut r = Report::new("smp", 2);
            r.extend([
                row("cacheline_rtt", 64, floor, false),
                row("short_rtt", 0, short, false),
            ]);
            r.compute_ratios();
            r
        })
        .collect();
        let s = rounds_summary(&rounds);
        let short = &s[0];
        assert_eq!(short.target.key, "short_rtt_vs_floor");
        let (m, lo, hi) = short.spread(false).unwrap();
        assert!((m - 1.65).abs() < 1e-9 && (lo - 1.5).abs() < 1e-9 && (hi - 2.0).abs() < 1e-9);
        let (fm, _, fhi) = short.spread(true).unwrap();
        assert!((fm - 1.6).abs() < 1e-9 && (fhi - 1.7).abs() < 1e-9);
        assert_eq!(short.met_rounds(), 3);
        assert_eq!(short.target.value, Some(m));
        // A target no round measured has no value and no met count in the table.
        assert!(s[3].spread(false).is_none());
        let text = rounds_table(&rounds);
        assert!(text.contains("3 in the fast state"), "{text}");
        assert!(text.contains("400*"), "{text}");
        let lines = rounds_json(&rounds);
        let v: Value = serde_json::from_str(&lines[4]).unwrap();
        assert_eq!(v["suite"], "rounds");
        assert_eq!(v["fast_rounds"], 3);
        assert_eq!(v["median"], 1.65);
        assert_eq!(v["met_rounds"], 3);
    }

    #[test]
    fn udp_ratios_and_targets() {
        let mut r = Report::new("udp", 2);
        r.extend([
            row("raw_udp_rtt", 8, 10_000.0, false),
            row("short_rtt", 0, 10_500.0, false),
            row("medium_rtt", 8, 11_550.0, false),
            row("put_lat", 8, 13_000.0, false),
            row("get_lat", 8, 11_000.0, false),
            row("memcpy_bw", TARGET_BYTES, 50_000.0, true),
            row("raw_udp_stream_bw", TARGET_BYTES, 300_000.0, true),
            row("long_bw", TARGET_BYTES, 400_000.0, true),
            row("put_bw", TARGET_BYTES, 500_000.0, true),
        ]);
        r.compute_ratios();
        let t = r.targets();
        let keys: Vec<&str> = t.iter().map(|t| t.key).collect();
        assert_eq!(
            keys,
            [
                "short_rtt_vs_raw_udp",
                "put_lat_vs_raw_udp",
                "get_lat_vs_raw_udp",
                "long_bw_vs_raw_udp",
                "put_bw_vs_raw_udp",
                "fetch_add_vs_raw_udp",
                "strided_tile_vs_row_puts"
            ]
        );
        assert_eq!(t[0].value, Some(1.05));
        assert_eq!(t[0].met(), Some(true));
        assert_eq!(t[1].met(), Some(false));
        assert_eq!(t[2].met(), Some(true));
        let close = |v: Option<f64>, x: f64| (v.unwrap() - x).abs() < 1e-9;
        assert!(close(t[3].value, 0.75));
        assert_eq!(t[3].met(), Some(true));
        assert!(close(t[4].value, 0.6));
        assert_eq!(t[4].met(), Some(false));
        // Medium RTT stays judged against Short; bandwidth rows against raw streaming.
        assert!((r.find("medium_rtt", None).unwrap().ratio.unwrap() - 1.1).abs() < 1e-9);
        let lines = r.json_lines();
        let put: Value = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v["op"] == "put_bw_vs_raw_udp")
            .unwrap();
        assert_eq!(put["met"], false);
        let table = r.table();
        assert!(table.contains("Short RTT / raw UDP RTT"));
        assert!(!table.contains("cache-line"));
    }
}
