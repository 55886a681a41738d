//! Vector, indexed and strided put/get (`spec/core.md` §7c): the target's side in segment
//! offsets, the local side in buffers (or, for the non-blocking gets, local segment offsets).

use std::ffi::{c_int, c_void};

use crate::am::bytes;
use crate::rma::{make_handle, HandleId};
use crate::status::{guard, CError, OK};
use crate::{array, ep, required};

/// A range of a segment: `len` bytes at `offset`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Range {
    /// Where the range starts in the segment.
    pub offset: u64,
    /// Its length in bytes.
    pub len: usize,
}

/// A local buffer that is read: `len` bytes at `addr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ConstBuf {
    /// The first byte (may be null when `len` is 0).
    pub addr: *const c_void,
    /// Its length in bytes.
    pub len: usize,
}

/// A local buffer that is written: `len` bytes at `addr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MutBuf {
    /// The first byte (may be null when `len` is 0).
    pub addr: *mut c_void,
    /// Its length in bytes.
    pub len: usize,
}

/// The read buffers as slices.
///
/// # Safety
/// - Each buffer is valid for reads of its length for `'a`.
unsafe fn read_pieces<'a>(
    bufs: impl Iterator<Item = (*const c_void, usize)>,
    what: &str,
) -> Result<Vec<&'a [u8]>, CError> {
    bufs.enumerate()
        .map(|(i, (p, n))| {
            // SAFETY: the caller's contract, for each buffer.
            unsafe { bytes(p, n, &format!("{what}[{i}]")) }
        })
        .collect()
}

/// The written buffers as slices, refused when two of them overlap (they would alias).
///
/// # Safety
/// - Each buffer is valid for writes of its length for `'a`, and nothing else reads or
///   writes them meanwhile.
unsafe fn write_pieces<'a>(
    bufs: impl Iterator<Item = (*mut c_void, usize)>,
    what: &str,
) -> Result<Vec<&'a mut [u8]>, CError> {
    let bufs: Vec<(usize, *mut c_void, usize)> =
        bufs.enumerate().map(|(i, (p, n))| (i, p, n)).collect();
    for &(i, p, n) in &bufs {
        if n > 0 && (p.is_null() || n > isize::MAX as usize) {
            return Err(crate::am::bad_bytes(p, n, &format!("{what}[{i}]")));
        }
    }
    let mut spans: Vec<(usize, usize, usize)> = bufs
        .iter()
        .filter(|b| b.2 > 0)
        .map(|&(i, p, n)| (p as usize, n, i))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        let (a, an, ai) = w[0];
        let (b, _, bi) = w[1];
        if a.saturating_add(an) > b {
            return Err(CError::bad_arg(format!(
                "{what}[{ai}] and {what}[{bi}] overlap; the pieces written must be distinct"
            )));
        }
    }
    Ok(bufs
        .into_iter()
        .map(|(_, p, n)| {
            if n == 0 {
                &mut [][..]
            } else {
                // SAFETY: non-null, writable for `n` bytes (the caller's contract) and
                // overlapping no other piece (checked above).
                unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) }
            }
        })
        .collect())
}

fn ranges(r: &[Range]) -> Vec<(u64, usize)> {
    r.iter().map(|r| (r.offset, r.len)).collect()
}

/// The bytes a local strided region spans: `count[0]` plus, at each level, `count[k + 1] - 1`
/// strides; 0 when a count is 0. The core checks the strides and counts themselves.
fn strided_extent(strides: &[usize], count: &[usize], what: &str) -> Result<usize, CError> {
    if count.contains(&0) {
        return Ok(0);
    }
    let mut extent = count.first().copied().unwrap_or(0);
    for (k, &s) in strides.iter().enumerate() {
        let more = count
            .get(k + 1)
            .and_then(|&c| (c - 1).checked_mul(s))
            .and_then(|m| extent.checked_add(m));
        extent = more.ok_or_else(|| {
            CError::bad_arg(format!(
                "the {what} strided region is larger than memory can hold (level {k})"
            ))
        })?;
    }
    Ok(extent)
}

/// The target side's strides, the local side's, and the counts.
type StridedLists<'a, S1, S2> = (&'a [S1], &'a [S2], &'a [usize]);

/// The stride lists and counts of a strided call: `levels` strides per side and `levels + 1`
/// counts.
///
/// # Safety
/// - The arrays are valid for reads of `levels` (strides) and `levels + 1` (count) elements.
unsafe fn strided_lists<'a, S1, S2>(
    remote: *const S1,
    local: *const S2,
    count: *const usize,
    levels: usize,
) -> Result<StridedLists<'a, S1, S2>, CError> {
    let n = levels
        .checked_add(1)
        .ok_or_else(|| CError::bad_arg(format!("stridelevels {levels} is too large")))?;
    // SAFETY: the caller's contract for each array.
    unsafe {
        Ok((
            array(remote, levels, "the target side's strides")?,
            array(local, levels, "the local side's strides")?,
            array(count, n, "count")?,
        ))
    }
}

/// Store a handle id.
///
/// # Safety
/// - `handle` is valid for a write of an `amnet_handle_t` (checked non-null by the caller).
unsafe fn put_handle(handle: *mut HandleId, h: amnet::Handle) -> Result<c_int, CError> {
    let id = make_handle(h)?;
    // SAFETY: the caller's contract.
    unsafe { handle.write(id) };
    Ok(OK)
}

/// Vector put: the `srccount` local pieces at `src`, in order, into the `dstcount` ranges of
/// `rank`'s segment at `dst`, in order (equal totals). Complete on return.
///
/// # Safety
/// - `dst` is valid for reads of `dstcount` ranges, `src` of `srccount` buffers, and each
///   buffer for reads of its length.
#[no_mangle]
pub unsafe extern "C" fn amnet_put_vector(
    rank: u32,
    dst: *const Range,
    dstcount: usize,
    src: *const ConstBuf,
    srccount: usize,
) -> c_int {
    guard("amnet_put_vector", || {
        // SAFETY: the caller's contract for the arrays and the buffers.
        let (d, s) = unsafe {
            let d = array(dst, dstcount, "dst")?;
            let s = array(src, srccount, "src")?;
            (d, read_pieces(s.iter().map(|b| (b.addr, b.len)), "src")?)
        };
        ep()?.put_vector(rank, &ranges(d), &s)?;
        Ok(OK)
    })
}

/// Vector put with an explicit handle in `*handle`; the local pieces may be reused on return.
///
/// # Safety
/// - As `amnet_put_vector`; `handle` is valid for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_put_vector_nb(
    rank: u32,
    dst: *const Range,
    dstcount: usize,
    src: *const ConstBuf,
    srccount: usize,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_put_vector_nb", || {
        required(handle, "handle")?;
        // SAFETY: the caller's contract for the arrays and the buffers.
        let (d, s) = unsafe {
            let d = array(dst, dstcount, "dst")?;
            let s = array(src, srccount, "src")?;
            (d, read_pieces(s.iter().map(|b| (b.addr, b.len)), "src")?)
        };
        let h = ep()?.put_vector_nb(rank, &ranges(d), &s)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put_handle(handle, h) }
    })
}

/// Vector get: the `srccount` ranges of `rank`'s segment at `src`, in order, into the
/// `dstcount` local pieces at `dst`, in order (equal totals; the pieces may not overlap).
/// Complete on return.
///
/// # Safety
/// - `src` is valid for reads of `srccount` ranges, `dst` of `dstcount` buffers, and each
///   buffer for writes of its length, untouched by anything else during the call.
#[no_mangle]
pub unsafe extern "C" fn amnet_get_vector(
    rank: u32,
    src: *const Range,
    srccount: usize,
    dst: *const MutBuf,
    dstcount: usize,
) -> c_int {
    guard("amnet_get_vector", || {
        // SAFETY: the caller's contract for the arrays and the buffers.
        let (s, mut d) = unsafe {
            let s = array(src, srccount, "src")?;
            let d = array(dst, dstcount, "dst")?;
            (s, write_pieces(d.iter().map(|b| (b.addr, b.len)), "dst")?)
        };
        ep()?.get_vector(rank, &ranges(s), &mut d)?;
        Ok(OK)
    })
}

/// Vector get into this rank's own segment (the `dst` ranges are local segment offsets),
/// with an explicit handle in `*handle`; leave those bytes alone until it is synced.
///
/// # Safety
/// - `src` is valid for reads of `srccount` ranges, `dst` of `dstcount`; `handle` for a write
///   of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_get_vector_nb_local(
    rank: u32,
    src: *const Range,
    srccount: usize,
    dst: *const Range,
    dstcount: usize,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_get_vector_nb_local", || {
        required(handle, "handle")?;
        // SAFETY: the caller's contract for the arrays.
        let (s, d) = unsafe { (array(src, srccount, "src")?, array(dst, dstcount, "dst")?) };
        let h = ep()?.get_vector_nb_local(rank, &ranges(s), &ranges(d))?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put_handle(handle, h) }
    })
}

/// Indexed put: `srccount` local pieces of `srclen` bytes each (pointers at `src`) into
/// `dstcount` ranges of `dstlen` bytes each at the offsets at `dst` (equal totals). Complete
/// on return.
///
/// # Safety
/// - `dst` is valid for reads of `dstcount` offsets, `src` of `srccount` pointers, each
///   valid for reads of `srclen` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_put_indexed(
    rank: u32,
    dst: *const u64,
    dstcount: usize,
    dstlen: usize,
    src: *const *const c_void,
    srccount: usize,
    srclen: usize,
) -> c_int {
    guard("amnet_put_indexed", || {
        // SAFETY: the caller's contract for the arrays and the buffers.
        let (d, s) = unsafe {
            let d = array(dst, dstcount, "dst")?;
            let s = array(src, srccount, "src")?;
            (d, read_pieces(s.iter().map(|&p| (p, srclen)), "src")?)
        };
        ep()?.put_indexed(rank, d, dstlen, &s)?;
        Ok(OK)
    })
}

/// Indexed put with an explicit handle in `*handle`; the local pieces may be reused on
/// return.
///
/// # Safety
/// - As `amnet_put_indexed`; `handle` is valid for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_put_indexed_nb(
    rank: u32,
    dst: *const u64,
    dstcount: usize,
    dstlen: usize,
    src: *const *const c_void,
    srccount: usize,
    srclen: usize,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_put_indexed_nb", || {
        required(handle, "handle")?;
        // SAFETY: the caller's contract for the arrays and the buffers.
        let (d, s) = unsafe {
            let d = array(dst, dstcount, "dst")?;
            let s = array(src, srccount, "src")?;
            (d, read_pieces(s.iter().map(|&p| (p, srclen)), "src")?)
        };
        let h = ep()?.put_indexed_nb(rank, d, dstlen, &s)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put_handle(handle, h) }
    })
}

/// Indexed get: `srccount` ranges of `srclen` bytes at the offsets at `src` into `dstcount`
/// local pieces of `dstlen` bytes (pointers at `dst`; they may not overlap). Complete on
/// return.
///
/// # Safety
/// - `src` is valid for reads of `srccount` offsets, `dst` of `dstcount` pointers, each
///   valid for writes of `dstlen` bytes, untouched by anything else during the call.
#[no_mangle]
pub unsafe extern "C" fn amnet_get_indexed(
    rank: u32,
    src: *const u64,
    srccount: usize,
    srclen: usize,
    dst: *const *mut c_void,
    dstcount: usize,
    dstlen: usize,
) -> c_int {
    guard("amnet_get_indexed", || {
        // SAFETY: the caller's contract for the arrays and the buffers.
        let (s, mut d) = unsafe {
            let s = array(src, srccount, "src")?;
            let d = array(dst, dstcount, "dst")?;
            (s, write_pieces(d.iter().map(|&p| (p, dstlen)), "dst")?)
        };
        ep()?.get_indexed(rank, s, srclen, &mut d)?;
        Ok(OK)
    })
}

/// Indexed get into this rank's own segment (`dst` holds local segment offsets), with an
/// explicit handle in `*handle`.
///
/// # Safety
/// - `src` is valid for reads of `srccount` offsets, `dst` of `dstcount`; `handle` for a
///   write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_get_indexed_nb_local(
    rank: u32,
    src: *const u64,
    srccount: usize,
    srclen: usize,
    dst: *const u64,
    dstcount: usize,
    dstlen: usize,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_get_indexed_nb_local", || {
        required(handle, "handle")?;
        // SAFETY: the caller's contract for the arrays.
        let (s, d) = unsafe { (array(src, srccount, "src")?, array(dst, dstcount, "dst")?) };
        let h = ep()?.get_indexed_nb_local(rank, s, srclen, d, dstlen)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put_handle(handle, h) }
    })
}

/// Strided put (GASNet's convention): `count[0]` contiguous bytes per chunk and `count[k + 1]`
/// chunks at level `k`, `strides[k]` bytes apart, with `stridelevels` strides per side and
/// `stridelevels + 1` counts; the local region starts at `src`, the target's at `dst_offset`
/// in `rank`'s segment. Complete on return.
///
/// # Safety
/// - `dst_strides` and `src_strides` are valid for reads of `stridelevels` elements, `count`
///   of `stridelevels + 1`; `src` for reads of the bytes the local region spans.
#[no_mangle]
pub unsafe extern "C" fn amnet_put_strided(
    rank: u32,
    dst_offset: u64,
    dst_strides: *const u64,
    src: *const c_void,
    src_strides: *const usize,
    count: *const usize,
    stridelevels: usize,
) -> c_int {
    guard("amnet_put_strided", || {
        // SAFETY: the caller's contract for the arrays and the local region.
        let (ds, ss, c, s) = unsafe {
            let (ds, ss, c) = strided_lists(dst_strides, src_strides, count, stridelevels)?;
            let s = bytes(src, strided_extent(ss, c, "local")?, "src")?;
            (ds, ss, c, s)
        };
        ep()?.put_strided(rank, dst_offset, ds, s, ss, c)?;
        Ok(OK)
    })
}

/// Strided put with an explicit handle in `*handle`; the local region may be reused on
/// return.
///
/// # Safety
/// - As `amnet_put_strided`; `handle` is valid for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_put_strided_nb(
    rank: u32,
    dst_offset: u64,
    dst_strides: *const u64,
    src: *const c_void,
    src_strides: *const usize,
    count: *const usize,
    stridelevels: usize,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_put_strided_nb", || {
        required(handle, "handle")?;
        // SAFETY: the caller's contract for the arrays and the local region.
        let (ds, ss, c, s) = unsafe {
            let (ds, ss, c) = strided_lists(dst_strides, src_strides, count, stridelevels)?;
            let s = bytes(src, strided_extent(ss, c, "local")?, "src")?;
            (ds, ss, c, s)
        };
        let h = ep()?.put_strided_nb(rank, dst_offset, ds, s, ss, c)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put_handle(handle, h) }
    })
}

/// Strided get: the target's region at `src_offset` in `rank`'s segment into the local
/// region at `dst` (see `amnet_put_strided`). Complete on return.
///
/// # Safety
/// - `src_strides` and `dst_strides` are valid for reads of `stridelevels` elements, `count`
///   of `stridelevels + 1`; `dst` for writes of the bytes the local region spans, untouched
///   by anything else during the call.
#[no_mangle]
pub unsafe extern "C" fn amnet_get_strided(
    rank: u32,
    src_offset: u64,
    src_strides: *const u64,
    dst: *mut c_void,
    dst_strides: *const usize,
    count: *const usize,
    stridelevels: usize,
) -> c_int {
    guard("amnet_get_strided", || {
        // SAFETY: the caller's contract for the arrays and the local region.
        let (ss, ds, c, mut d) = unsafe {
            let (ss, ds, c) = strided_lists(src_strides, dst_strides, count, stridelevels)?;
            let len = strided_extent(ds, c, "local")?;
            let d = write_pieces(std::iter::once((dst, len)), "dst")?;
            (ss, ds, c, d)
        };
        let d = d.pop().unwrap_or_default();
        ep()?.get_strided(rank, src_offset, ss, d, ds, c)?;
        Ok(OK)
    })
}

/// Strided get into this rank's own segment (the local region at `dst_offset`, its strides
/// in segment bytes), with an explicit handle in `*handle`.
///
/// # Safety
/// - The stride arrays are valid for reads of `stridelevels` elements, `count` of
///   `stridelevels + 1`; `handle` for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_get_strided_nb_local(
    rank: u32,
    src_offset: u64,
    src_strides: *const u64,
    dst_offset: u64,
    dst_strides: *const u64,
    count: *const usize,
    stridelevels: usize,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_get_strided_nb_local", || {
        required(handle, "handle")?;
        // SAFETY: the caller's contract for the arrays.
        let (ss, ds, c) = unsafe { strided_lists(src_strides, dst_strides, count, stridelevels)? };
        let h = ep()?.get_strided_nb_local(rank, src_offset, ss, dst_offset, ds, c)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put_handle(handle, h) }
    })
}
