//! The `vis` suite: a 2-D tile of 64x64 `f64` (64 rows of 512 bytes) out of an array of 1024
//! columns (rows 8 KiB apart, on both sides), put from rank 0 into rank 1's segment as one
//! strided put and as 64 blocking row puts, the two timed in alternation.

use std::sync::atomic::Ordering;

use amnet::Endpoint;

use crate::am::{self, AmState};
use crate::measure::{time_paired, Side};
use crate::report::Row;
use crate::{BenchError, Plan};

/// Rows of the tile.
const ROWS: usize = 64;
/// Bytes of a tile row (64 `f64`).
const ROW_BYTES: usize = 64 * 8;
/// Bytes between rows of the array (1024 `f64`).
const STRIDE: usize = 1024 * 8;

/// Segment bytes the suite needs.
pub(crate) const fn segment_bytes() -> usize {
    ROWS * STRIDE
}

/// Collective: the tile puts. Returns the rows on rank 0.
pub(crate) fn run(ep: &Endpoint, st: &AmState, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let me = ep.rank();
    let array = crate::pattern(ROWS * STRIDE);
    let mut marks = st.marks.load(Ordering::Acquire);
    ep.barrier()?;
    let mut rows = Vec::new();
    if me == 0 {
        let samples = (plan.iters / if plan.network { 100 } else { 10 }).max(20);
        let warmup = plan.warmup(samples).min(50);
        let (strided, separate) = time_paired(warmup, samples, 1, |side| match side {
            Side::Op => ep.put_strided(
                1,
                0,
                &[STRIDE as u64],
                &array,
                &[STRIDE],
                &[ROW_BYTES, ROWS],
            ),
            Side::Floor => {
                for r in 0..ROWS {
                    ep.put(
                        1,
                        (r * STRIDE) as u64,
                        &array[r * STRIDE..r * STRIDE + ROW_BYTES],
                    )?;
                }
                Ok(())
            }
        })?;
        // Untimed: tell rank 1 the puts are over.
        ep.request_short(1, am::H_MARK, &[])?;
        let bytes = ROWS * ROW_BYTES;
        rows.push(Row::bandwidth(
            "vis",
            "strided_tile_put",
            bytes,
            &strided,
            1,
        ));
        rows.push(Row::bandwidth("vis", "row_puts_tile", bytes, &separate, 1));
    } else if me == 1 {
        // Serve the puts (the AM path needs this rank's polls) until the mark.
        marks += 1;
        ep.wait_until(|| st.marks.load(Ordering::Acquire) >= marks)?;
    }
    ep.barrier()?;
    Ok(rows)
}
