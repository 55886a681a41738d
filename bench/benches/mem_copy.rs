//! Criterion benchmark of bulk copies at different relative alignments: `std::ptr::copy`
//! (glibc's `memmove`) against `amnet_core::mem::copy`, 124 KiB (a host-scratch slot) from a
//! page-aligned source to a destination 0, 16 or 64 bytes past a page.

use criterion::{BenchmarkId, Criterion, Throughput};

const LEN: usize = 124 << 10;

fn main() {
    let mut src = vec![1u8; LEN + 8192];
    let mut dst = vec![0u8; LEN + 8192];
    let s0 = src.as_ptr().align_offset(4096);
    let d0 = dst.as_ptr().align_offset(4096);
    let src = &mut src[s0..s0 + LEN];
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("mem_copy_124k");
    g.throughput(Throughput::Bytes(LEN as u64));
    for apart in [0usize, 16, 64] {
        let to = &mut dst[d0 + apart..d0 + apart + LEN];
        g.bench_function(BenchmarkId::new("ptr_copy", apart), |b| {
            // SAFETY: two distinct buffers of `LEN` bytes each.
            b.iter(|| unsafe { std::ptr::copy(src.as_ptr(), to.as_mut_ptr(), LEN) });
        });
        g.bench_function(BenchmarkId::new("mem_copy", apart), |b| {
            // SAFETY: as above.
            b.iter(|| unsafe { amnet_core::mem::copy(src.as_ptr(), to.as_mut_ptr(), LEN) });
        });
    }
    g.finish();
    c.final_summary();
}
