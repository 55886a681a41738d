//! Vector, indexed and strided put/get (VIS, spec/core.md §7c), in the forms of GASNet's
//! `gasnet_putv`/`puti`/`puts` and their gets.
//!
//! Every form reduces to two lists of byte ranges with the same total, walked in order: the
//! target's (segment offsets) and the local one (pieces of the caller's buffers). Where the
//! target's segment is mapped here the ranges are copied one by one. Elsewhere a put packs its
//! local bytes once; on the native path each target range is one native put, on the AM path
//! the ranges and their bytes travel packed in Medium requests (library handler `VIS_PUT`:
//! as many ranges as fit in `max_medium`, long ranges split) that the target unpacks into its
//! segment. A get on the AM path asks for packed ranges (`VIS_GET`) and receives their bytes
//! in one Medium reply per request, into a staging buffer it then scatters.

use std::sync::Arc;

use crate::conduit::{Category, OutMsg};
use crate::endpoint::{seg_off, Attached, Endpoint};
use crate::handler::{HandlerTable, Token};
use crate::handlers::{GET_REPLY, VIS_ACK, VIS_GET, VIS_PUT};
use crate::rma::{stray, GetClaim, Handle, OpState, ReplyKind, Waiting};
use crate::stats::Ctr;
use crate::{Error, Rank, Result};

/// Bytes of one packed range: offset (u64) and length (u32), little-endian.
const RANGE_BYTES: usize = 12;

/// Local pieces of a buffer: (start, length).
type Pieces = Vec<(usize, usize)>;

/// A range of the target's segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    off: u64,
    len: usize,
}

/// Checks every piece of this rank's own segment (`rank`) that a get writes; the error
/// names the piece.
fn check_local(att: &Attached, op: &'static str, rank: Rank, pieces: &[Range]) -> Result<()> {
    check_ranges(att, op, rank, pieces).map_err(|e| match e {
        Error::Usage { op, detail } => Error::Usage {
            op,
            detail: format!("local side: {detail}"),
        },
        e => e,
    })
}

/// Checks every target range against `rank`'s segment; the error names the piece.
fn check_ranges(att: &Attached, op: &'static str, rank: Rank, ranges: &[Range]) -> Result<()> {
    att.check_rank(rank)?;
    let seg_len = att.seg_lens[rank as usize];
    for (i, r) in ranges.iter().enumerate() {
        let inside = r
            .off
            .checked_add(r.len as u64)
            .is_some_and(|end| end <= seg_len as u64);
        if !inside {
            return Err(Error::Usage {
                op,
                detail: format!(
                    "piece {i} of {} (offset {}, {} bytes) lies outside rank {rank}'s segment \
                     of {seg_len} bytes",
                    ranges.len(),
                    r.off,
                    r.len
                ),
            });
        }
    }
    Ok(())
}

/// The chunks of a strided region: `count[0]` contiguous bytes, `count[1..]` chunks at each
/// stride level, `strides[k]` bytes between chunks of level `k + 1`. Calls `f(offset)` for
/// every chunk's start, in order (the lowest level varies fastest).
fn strided_chunks(strides: &[u64], count: &[usize], mut f: impl FnMut(u64)) {
    let levels = strides.len();
    let mut idx = vec![0usize; levels];
    loop {
        let off = idx.iter().zip(strides).map(|(&i, &s)| i as u64 * s).sum();
        f(off);
        // Advance the multi-index.
        let mut k = 0;
        loop {
            if k == levels {
                return;
            }
            idx[k] += 1;
            if idx[k] < count[k + 1] {
                break;
            }
            idx[k] = 0;
            k += 1;
        }
    }
}

/// Validates a strided description: `count` has one more entry than `strides`, and (for the
/// side written, `written`) the chunks do not overlap: `strides[0] >= count[0]` and
/// `strides[k] >= count[k] * strides[k - 1]`. Returns the extent (the last byte + 1 from the
/// base) and the number of chunks.
fn strided_extent(
    op: &'static str,
    side: &str,
    strides: &[u64],
    count: &[usize],
    written: bool,
) -> Result<(u64, usize)> {
    let usage = |detail: String| Error::Usage { op, detail };
    if count.len() != strides.len() + 1 {
        return Err(usage(format!(
            "{side}: {} stride levels need {} counts, got {}",
            strides.len(),
            strides.len() + 1,
            count.len()
        )));
    }
    if count.contains(&0) {
        return Ok((0, 0));
    }
    let mut chunks = 1usize;
    let mut extent = count[0] as u64;
    for (k, &s) in strides.iter().enumerate() {
        let below = if k == 0 {
            count[0] as u64
        } else {
            strides[k - 1].checked_mul(count[k] as u64).ok_or_else(|| {
                usage(format!(
                    "{side}: stride {} times its count overflows",
                    k - 1
                ))
            })?
        };
        if written && s < below {
            return Err(usage(format!(
                "{side}: stride {k} ({s} bytes) is smaller than the {below} bytes below it, so \
                 written chunks would overlap"
            )));
        }
        chunks = chunks
            .checked_mul(count[k + 1])
            .ok_or_else(|| usage(format!("{side}: the chunk count overflows")))?;
        extent = s
            .checked_mul(count[k + 1] as u64 - 1)
            .and_then(|e| e.checked_add(extent))
            .ok_or_else(|| usage(format!("{side}: the extent overflows")))?;
    }
    Ok((extent, chunks))
}

/// The chunk offsets of two strided regions of the same counts, in lockstep: `f(a, b)` for
/// every chunk (nothing when a count is 0).
fn strided_pairs(a: &[u64], b: &[usize], count: &[usize], mut f: impl FnMut(u64, usize)) {
    if count.contains(&0) {
        return;
    }
    let levels = a.len();
    let mut idx = [0usize; 16];
    let mut heap;
    let idx: &mut [usize] = if levels <= 16 {
        &mut idx[..levels]
    } else {
        heap = vec![0usize; levels];
        &mut heap
    };
    let (mut oa, mut ob) = (0u64, 0usize);
    loop {
        f(oa, ob);
        let mut k = 0;
        loop {
            if k == levels {
                return;
            }
            idx[k] += 1;
            oa += a[k];
            ob += b[k];
            if idx[k] < count[k + 1] {
                break;
            }
            oa -= a[k] * count[k + 1] as u64;
            ob -= b[k] * count[k + 1];
            idx[k] = 0;
            k += 1;
        }
    }
}

/// The target ranges of a strided region at `base`, adjacent chunks merged.
fn strided_ranges(base: u64, strides: &[u64], count: &[usize]) -> Vec<Range> {
    let mut v: Vec<Range> = Vec::new();
    strided_chunks(strides, count, |off| {
        let off = base + off;
        match v.last_mut() {
            Some(last) if last.off + last.len as u64 == off => last.len += count[0],
            _ => v.push(Range { off, len: count[0] }),
        }
    });
    v
}

/// The local pieces of a strided region of a buffer of `buf_len` bytes, as (start, len).
fn strided_local(
    op: &'static str,
    buf_len: usize,
    strides: &[usize],
    count: &[usize],
    written: bool,
) -> Result<Pieces> {
    let s64: Vec<u64> = strides.iter().map(|&s| s as u64).collect();
    let (extent, _) = strided_extent(op, "local side", &s64, count, written)?;
    if extent > buf_len as u64 {
        return Err(Error::Usage {
            op,
            detail: format!(
                "local side: the strided region spans {extent} bytes, the buffer holds {buf_len}"
            ),
        });
    }
    let mut v: Vec<(usize, usize)> = Vec::new();
    if count.contains(&0) {
        return Ok(v);
    }
    strided_chunks(&s64, count, |off| {
        // Below `extent`, which fits the buffer's `usize` length (checked above).
        let off = usize::try_from(off).unwrap_or(usize::MAX);
        match v.last_mut() {
            Some(last) if last.0 + last.1 == off => last.1 += count[0],
            _ => v.push((off, count[0])),
        }
    });
    Ok(v)
}

/// Walks the target ranges and the local pieces together: `f(range offset, local piece index,
/// offset in the piece, len)` for every maximal span inside one range and one piece.
fn zip_spans(ranges: &[Range], pieces: &[usize], mut f: impl FnMut(u64, usize, usize, usize)) {
    let (mut p, mut in_p) = (0usize, 0usize);
    for r in ranges {
        let mut done = 0usize;
        while done < r.len {
            while pieces[p] == in_p {
                p += 1;
                in_p = 0;
            }
            let n = (r.len - done).min(pieces[p] - in_p);
            f(r.off + done as u64, p, in_p, n);
            done += n;
            in_p += n;
        }
    }
}

fn total_of(op: &'static str, ranges: &[Range], local: usize) -> Result<usize> {
    let remote: usize = ranges.iter().map(|r| r.len).sum();
    if remote != local {
        return Err(Error::Usage {
            op,
            detail: format!(
                "the target's pieces hold {remote} bytes, the local pieces {local}; they must \
                 be equal"
            ),
        });
    }
    Ok(remote)
}

pub(crate) fn register_handlers(t: &mut HandlerTable) -> Result<()> {
    t.insert(VIS_PUT, Box::new(vis_put_handler))?;
    t.insert(VIS_ACK, Box::new(vis_ack_handler))?;
    t.insert(VIS_GET, Box::new(vis_get_handler))?;
    Ok(())
}

/// Parses `n` packed ranges off the front of `payload`; None when they do not fit.
fn parse_ranges(payload: &[u8], n: u32) -> Option<(Vec<Range>, &[u8])> {
    let head = (n as usize).checked_mul(RANGE_BYTES)?;
    if payload.len() < head {
        return None;
    }
    let (h, rest) = payload.split_at(head);
    let ranges = h
        .chunks_exact(RANGE_BYTES)
        .map(|c| {
            let mut o = [0u8; 8];
            o.copy_from_slice(&c[..8]);
            let mut l = [0u8; 4];
            l.copy_from_slice(&c[8..]);
            Range {
                off: u64::from_le_bytes(o),
                len: u32::from_le_bytes(l) as usize,
            }
        })
        .collect();
    Some((ranges, rest))
}

/// `[id_lo, id_hi, n]`, payload `n` ranges then their bytes: writes them into this rank's
/// segment and acknowledges with a status (0: done, 1: refused, nothing written).
fn vis_put_handler(tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let &[id_lo, id_hi, n] = args else { return };
    let ep = tok.endpoint();
    let Ok(att) = ep.attached_for("vis put") else {
        return;
    };
    let me = ep.rank();
    let ok = match parse_ranges(payload, n) {
        Some((ranges, data))
            if ranges.iter().map(|r| r.len).sum::<usize>() == data.len()
                && check_ranges(att, "vis put", me, &ranges).is_ok() =>
        {
            let mut at = 0;
            for r in &ranges {
                // SAFETY: the range lies inside this rank's segment (checked just above),
                // mapped for the endpoint's life; the bytes come from the message.
                unsafe {
                    crate::mem::copy(data[at..].as_ptr(), att.seg.base.add(seg_off(r.off)), r.len);
                }
                at += r.len;
            }
            true
        }
        _ => false,
    };
    let st = u32::from(!ok);
    if let Err(e) = tok.reply(VIS_ACK, Category::Short, &[id_lo, id_hi, st], &[], 0, true) {
        crate::diag!("amnet: vis put acknowledgement failed: {e}");
    }
}

fn vis_ack_handler(tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    let chunk = match (args, tok.endpoint().attached_for("vis put")) {
        (&[lo, hi, _], Ok(att)) => att.pending.take([lo, hi], tok.src(), ReplyKind::VisAck),
        _ => None,
    };
    let Some(c) = chunk else {
        return stray(tok, "vis put acknowledgement");
    };
    if args[2] != 0 {
        c.op.fail(format!(
            "vis put to rank {}: the target refused a packed message (a range outside its \
             segment or a malformed message)",
            tok.src()
        ));
    }
    c.op.complete_one();
}

/// `[id_lo, id_hi, n]`, payload `n` ranges: replies their bytes, concatenated, in one
/// Medium (the library's get reply); an empty reply when a range lies outside the segment.
fn vis_get_handler(tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let &[id_lo, id_hi, n] = args else { return };
    let ep = tok.endpoint();
    let Ok(att) = ep.attached_for("vis get") else {
        return;
    };
    let me = ep.rank();
    let mut data = Vec::new();
    if let Some((ranges, rest)) = parse_ranges(payload, n) {
        let total: usize = ranges.iter().map(|r| r.len).sum();
        if rest.is_empty()
            && total <= att.max_medium
            && check_ranges(att, "vis get", me, &ranges).is_ok()
        {
            data.reserve_exact(total);
            for r in &ranges {
                // SAFETY: the range lies inside this rank's segment (checked above).
                let s =
                    unsafe { std::slice::from_raw_parts(att.seg.base.add(seg_off(r.off)), r.len) };
                data.extend_from_slice(s);
            }
        }
    }
    if let Err(e) = tok.reply(GET_REPLY, Category::Medium, &[id_lo, id_hi], &data, 0, true) {
        crate::diag!("amnet: vis get reply failed: {e}");
    }
}

/// Packed messages of at most `cap` bytes (more than [`RANGE_BYTES`]; a conduit's
/// `max_medium` is far larger): each a list of (range, bytes from the packed stream at
/// `at`), long ranges split.
fn batches(ranges: &[Range], cap: usize) -> Vec<Vec<(Range, usize)>> {
    let cap = cap.max(RANGE_BYTES + 1);
    let mut out: Vec<Vec<(Range, usize)>> = Vec::new();
    let mut cur: Vec<(Range, usize)> = Vec::new();
    let mut used = 0usize;
    let mut at = 0usize;
    for r in ranges {
        let mut done = 0usize;
        while done < r.len {
            if used + RANGE_BYTES >= cap {
                out.push(std::mem::take(&mut cur));
                used = 0;
            }
            let n = (r.len - done).min(cap - used - RANGE_BYTES);
            cur.push((
                Range {
                    off: r.off + done as u64,
                    len: n,
                },
                at,
            ));
            used += RANGE_BYTES + n;
            done += n;
            at += n;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn pack_header(batch: &[(Range, usize)], out: &mut Vec<u8>) {
    for (r, _) in batch {
        out.extend_from_slice(&r.off.to_le_bytes());
        out.extend_from_slice(&u32::try_from(r.len).unwrap_or(u32::MAX).to_le_bytes());
    }
}

impl Endpoint {
    /// Starts a put of `local` (pieces, in order) into `ranges` of `dest`'s segment. None when
    /// complete already.
    fn vis_put_start(
        &self,
        op: &'static str,
        dest: Rank,
        ranges: &[Range],
        local: &[&[u8]],
    ) -> Result<Option<Arc<OpState>>> {
        let att = self.attached_for(op)?;
        crate::endpoint::not_in_handler(op)?;
        check_ranges(att, op, dest, ranges)?;
        let total = total_of(op, ranges, local.iter().map(|p| p.len()).sum())?;
        let b = self.stats_block();
        b.add(Ctr::Puts, 1);
        b.add(Ctr::PutBytes, total as u64);
        if total == 0 {
            return Ok(None);
        }
        let lens: Vec<usize> = local.iter().map(|p| p.len()).collect();
        if let Some(base) = att.peers[dest as usize] {
            zip_spans(ranges, &lens, |off, p, at, n| {
                // SAFETY: the range was checked against `dest`'s segment, mapped at `base`
                // for the endpoint's life; the source is a live slice.
                unsafe { crate::mem::copy(local[p][at..].as_ptr(), base.0.add(seg_off(off)), n) };
            });
            return Ok(None);
        }
        let packed = local.concat();
        let st = self.new_op();
        if let Some(rma) = &att.native {
            let mut at = 0;
            for r in ranges {
                if let Some(t) = rma.put_nb(dest, r.off, &packed[at..at + r.len])? {
                    st.add_native(t);
                }
                at += r.len;
            }
            return Ok(if st.done() { None } else { Some(st) });
        }
        let mut msg = Vec::with_capacity(att.max_medium);
        for batch in batches(ranges, att.max_medium) {
            msg.clear();
            pack_header(&batch, &mut msg);
            for (r, at) in &batch {
                msg.extend_from_slice(&packed[*at..*at + r.len]);
            }
            self.send_packed(att, dest, &st, Waiting::VisAck, VIS_PUT, batch.len(), &msg)?;
        }
        Ok(Some(st))
    }

    /// A blocking get of `ranges` of `src_rank`'s segment into `local` (pieces, in order).
    fn vis_get(
        &self,
        op: &'static str,
        src_rank: Rank,
        ranges: &[Range],
        local: &mut [&mut [u8]],
    ) -> Result<()> {
        let att = self.attached_for(op)?;
        crate::endpoint::not_in_handler(op)?;
        check_ranges(att, op, src_rank, ranges)?;
        let total = total_of(op, ranges, local.iter().map(|p| p.len()).sum())?;
        let b = self.stats_block();
        b.add(Ctr::Gets, 1);
        b.add(Ctr::GetBytes, total as u64);
        if total == 0 {
            return Ok(());
        }
        let lens: Vec<usize> = local.iter().map(|p| p.len()).collect();
        if let Some(base) = att.peers[src_rank as usize] {
            zip_spans(ranges, &lens, |off, p, at, n| {
                // SAFETY: the range was checked against the source segment, mapped for the
                // endpoint's life; the destination is a live, exclusively borrowed slice.
                unsafe {
                    crate::mem::copy(base.0.add(seg_off(off)), local[p][at..].as_mut_ptr(), n);
                }
            });
            return Ok(());
        }
        // Staged: the bytes arrive packed, then scatter. The claim removes the pending
        // chunks and waits for native gets before `stage` goes, however this returns.
        let mut stage = vec![0u8; total];
        let cell = std::cell::OnceCell::new();
        let st = cell.get_or_init(|| self.new_op()).clone();
        let mut claim = GetClaim::new(self, &cell);
        self.vis_get_staged(att, src_rank, ranges, &mut stage, &st)?;
        claim.done = true;
        let mut at = 0;
        for p in local.iter_mut() {
            p.copy_from_slice(&stage[at..at + p.len()]);
            at += p.len();
        }
        Ok(())
    }

    /// Sends one packed message of `n` ranges (`payload`) to `handler` at `rank`, with an
    /// entry of `st` armed for its reply (taken back when the conduit refuses the message).
    #[allow(clippy::too_many_arguments)]
    fn send_packed(
        &self,
        att: &Attached,
        rank: Rank,
        st: &Arc<OpState>,
        waiting: Waiting,
        handler: u8,
        n: usize,
        payload: &[u8],
    ) -> Result<()> {
        let kind = waiting.kind();
        let id = att.pending.arm(st, rank, waiting);
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let sent = self.lib_request(
            rank,
            &OutMsg {
                handler,
                category: Category::Medium,
                is_reply: false,
                args: &[id[0], id[1], n],
                payload,
                long_offset: 0,
            },
        );
        if sent.is_err() {
            att.pending.disarm(id, rank, kind);
        }
        sent
    }

    /// Fills `stage` with the bytes of `ranges` through the native or the AM path and waits.
    fn vis_get_staged(
        &self,
        att: &Attached,
        src_rank: Rank,
        ranges: &[Range],
        stage: &mut [u8],
        st: &Arc<OpState>,
    ) -> Result<()> {
        // One pointer for every write into `stage` (no reborrow of it until the wait ends).
        // SAFETY: `stage` holds the ranges' total; the caller keeps it until every chunk and
        // ticket of `st` completed (its `GetClaim` removes them, or waits, on every path).
        unsafe { self.vis_get_issue(att, src_rank, ranges, stage.as_mut_ptr(), st)? };
        self.wait_op(st)
    }

    /// Starts the get of `ranges` of `src_rank`'s segment, packed on the AM path, into the
    /// bytes at `base` (as many as the ranges hold, in order), tracked by `st`.
    ///
    /// # Safety
    /// - `base` is valid for writes of the ranges' total, and nothing else accesses those
    ///   bytes, until every chunk and native ticket of `st` completed or was removed.
    unsafe fn vis_get_issue(
        &self,
        att: &Attached,
        src_rank: Rank,
        ranges: &[Range],
        base: *mut u8,
        st: &Arc<OpState>,
    ) -> Result<()> {
        if let Some(rma) = &att.native {
            let mut at = 0;
            for r in ranges {
                // SAFETY: `base + at .. + r.len` lies inside the destination (the ranges'
                // total is its length), which the caller keeps per the contract.
                let t = unsafe { rma.get_nb(src_rank, r.off, base.add(at), r.len)? };
                if let Some(t) = t {
                    st.add_native(t);
                }
                at += r.len;
            }
        } else {
            let cap = att.max_medium;
            let mut msg = Vec::with_capacity(cap);
            for batch in batches(ranges, cap) {
                // The reply carries only the bytes, at most `cap` of them.
                msg.clear();
                pack_header(&batch, &mut msg);
                let at = batch[0].1;
                let len: usize = batch.iter().map(|(r, _)| r.len).sum();
                let waiting = Waiting::GetReply {
                    // Inside the destination (see above); written only by the reply's handler.
                    dst: base as usize + at,
                    len,
                };
                self.send_packed(att, src_rank, st, waiting, VIS_GET, batch.len(), &msg)?;
            }
        }
        Ok(())
    }

    /// A non-blocking get of `ranges` of `src_rank`'s segment into the pieces `local` of this
    /// rank's own segment, in order. The destination is split into runs of pieces that
    /// follow each other in the segment; each run is fetched like a blocking get's staging
    /// buffer (packed on the AM path), so that a contiguous destination costs as few
    /// messages as the blocking form.
    fn vis_get_nb_local(
        &self,
        op: &'static str,
        src_rank: Rank,
        ranges: &[Range],
        local: &[Range],
    ) -> Result<Handle> {
        let att = self.attached_for(op)?;
        crate::endpoint::not_in_handler(op)?;
        check_ranges(att, op, src_rank, ranges)?;
        check_local(att, op, self.rank(), local)?;
        let total = total_of(op, ranges, local.iter().map(|r| r.len).sum())?;
        let b = self.stats_block();
        b.add(Ctr::Gets, 1);
        b.add(Ctr::GetBytes, total as u64);
        if total == 0 {
            return Ok(Handle { op: None });
        }
        let lens: Vec<usize> = local.iter().map(|r| r.len).collect();
        let lbase = att.seg.base;
        if let Some(base) = att.peers[src_rank as usize] {
            zip_spans(ranges, &lens, |off, p, at, n| {
                // SAFETY: both ranges were checked against their segments, each mapped for
                // the endpoint's life; `ptr::copy` tolerates overlap (a get from this rank).
                unsafe {
                    crate::mem::copy(
                        base.0.add(seg_off(off)),
                        lbase.add(seg_off(local[p].off + at as u64)),
                        n,
                    );
                }
            });
            return Ok(Handle { op: None });
        }
        // (local start, bytes, source ranges) of each run of contiguous destination spans.
        let mut runs: Vec<(u64, usize, Vec<Range>)> = Vec::new();
        zip_spans(ranges, &lens, |off, p, at, n| {
            let d = local[p].off + at as u64;
            match runs.last_mut() {
                Some((start, len, rs)) if *start + *len as u64 == d => {
                    *len += n;
                    match rs.last_mut() {
                        Some(last) if last.off + last.len as u64 == off => last.len += n,
                        _ => rs.push(Range { off, len: n }),
                    }
                }
                _ => runs.push((d, n, vec![Range { off, len: n }])),
            }
        });
        let st = self.new_op();
        for (d, _, rs) in &runs {
            // SAFETY: the run lies inside this rank's segment (its pieces were checked),
            // mapped for the endpoint's life; the client leaves those bytes alone until the
            // handle is synced, as for `get_nb_local`.
            let r = unsafe { self.vis_get_issue(att, src_rank, rs, lbase.add(seg_off(*d)), &st) };
            if let Err(e) = r {
                // Nothing of a failed call writes after it returns: the runs already asked
                // for are withdrawn (late replies then write nothing) or waited for.
                att.pending.cancel(&st);
                if let Some(rma) = &att.native {
                    let _ = st.settle_native(&**rma, true);
                }
                return Err(e);
            }
        }
        Ok(Handle {
            op: if st.done() { None } else { Some(st) },
        })
    }

    fn vis_put_blocking(
        &self,
        op: &'static str,
        dest: Rank,
        ranges: &[Range],
        local: &[&[u8]],
    ) -> Result<()> {
        // Native path, blocking: each span straight from the caller's pieces with the
        // conduit's blocking put (no packing, no tickets).
        if let Ok(att) = self.attached_for(op) {
            if let (None, Some(rma)) =
                (att.peers.get(dest as usize).copied().flatten(), &att.native)
            {
                crate::endpoint::not_in_handler(op)?;
                check_ranges(att, op, dest, ranges)?;
                let total = total_of(op, ranges, local.iter().map(|p| p.len()).sum())?;
                let b = self.stats_block();
                b.add(Ctr::Puts, 1);
                b.add(Ctr::PutBytes, total as u64);
                let lens: Vec<usize> = local.iter().map(|p| p.len()).collect();
                let mut r = Ok(());
                zip_spans(ranges, &lens, |off, p, at, n| {
                    if r.is_ok() {
                        r = rma.put(dest, off, &local[p][at..at + n]);
                    }
                });
                return r;
            }
        }
        match self.vis_put_start(op, dest, ranges, local)? {
            None => Ok(()),
            Some(st) => self.wait_op(&st),
        }
    }

    /// Vector put (`gasnet_putv`): the bytes of `src` (pieces, in order) into the pieces `dst`
    /// (segment offset, length) of `dest`'s segment, in order; the two totals must be equal.
    /// Blocking: complete at the target on return.
    pub fn put_vector(&self, dest: Rank, dst: &[(u64, usize)], src: &[&[u8]]) -> Result<()> {
        let r = to_ranges(dst);
        self.vis_put_blocking("put_vector", dest, &r, src)
    }

    /// [`put_vector`](Self::put_vector) with an explicit handle: `src` is consumed before the
    /// call returns; the handle completes when the bytes are in the target segment.
    pub fn put_vector_nb(&self, dest: Rank, dst: &[(u64, usize)], src: &[&[u8]]) -> Result<Handle> {
        let r = to_ranges(dst);
        Ok(Handle {
            op: self.vis_put_start("put_vector_nb", dest, &r, src)?,
        })
    }

    /// Vector get (`gasnet_getv`): the pieces `src` (segment offset, length) of `src_rank`'s
    /// segment, in order, into the pieces of `dst`; the totals must be equal. Blocking.
    pub fn get_vector(
        &self,
        src_rank: Rank,
        src: &[(u64, usize)],
        dst: &mut [&mut [u8]],
    ) -> Result<()> {
        let r = to_ranges(src);
        self.vis_get("get_vector", src_rank, &r, dst)
    }

    /// [`get_vector`](Self::get_vector) with an explicit handle, into this rank's own
    /// segment: the pieces `src` (segment offset, length) of `src_rank`'s segment, in order,
    /// into the pieces `dst` (offset, length) of the local segment; the totals must be equal.
    /// The handle completes when every byte is in place; leave those bytes alone until then.
    /// Destination pieces that follow each other are fetched together (packed on the AM path).
    pub fn get_vector_nb_local(
        &self,
        src_rank: Rank,
        src: &[(u64, usize)],
        dst: &[(u64, usize)],
    ) -> Result<Handle> {
        self.vis_get_nb_local(
            "get_vector_nb_local",
            src_rank,
            &to_ranges(src),
            &to_ranges(dst),
        )
    }

    /// Indexed put (`gasnet_puti`): `src` (pieces, in order) into `dst_len` bytes at each
    /// offset of `dst` in `dest`'s segment. Blocking.
    pub fn put_indexed(
        &self,
        dest: Rank,
        dst: &[u64],
        dst_len: usize,
        src: &[&[u8]],
    ) -> Result<()> {
        let r: Vec<Range> = dst.iter().map(|&off| Range { off, len: dst_len }).collect();
        self.vis_put_blocking("put_indexed", dest, &r, src)
    }

    /// [`put_indexed`](Self::put_indexed) with an explicit handle (`src` consumed on return).
    pub fn put_indexed_nb(
        &self,
        dest: Rank,
        dst: &[u64],
        dst_len: usize,
        src: &[&[u8]],
    ) -> Result<Handle> {
        let r: Vec<Range> = dst.iter().map(|&off| Range { off, len: dst_len }).collect();
        Ok(Handle {
            op: self.vis_put_start("put_indexed_nb", dest, &r, src)?,
        })
    }

    /// Indexed get (`gasnet_geti`): `src_len` bytes at each offset of `src` in `src_rank`'s
    /// segment, in order, into the pieces of `dst`. Blocking.
    pub fn get_indexed(
        &self,
        src_rank: Rank,
        src: &[u64],
        src_len: usize,
        dst: &mut [&mut [u8]],
    ) -> Result<()> {
        let r: Vec<Range> = src.iter().map(|&off| Range { off, len: src_len }).collect();
        self.vis_get("get_indexed", src_rank, &r, dst)
    }

    /// [`get_indexed`](Self::get_indexed) with an explicit handle, into this rank's own
    /// segment: `src_len` bytes at each offset of `src` in `src_rank`'s segment, in order,
    /// into `dst_len` bytes at each offset of `dst` in the local segment. The handle completes
    /// when every byte is in place.
    pub fn get_indexed_nb_local(
        &self,
        src_rank: Rank,
        src: &[u64],
        src_len: usize,
        dst: &[u64],
        dst_len: usize,
    ) -> Result<Handle> {
        let r: Vec<Range> = src.iter().map(|&off| Range { off, len: src_len }).collect();
        let l: Vec<Range> = dst.iter().map(|&off| Range { off, len: dst_len }).collect();
        self.vis_get_nb_local("get_indexed_nb_local", src_rank, &r, &l)
    }

    /// Strided put (`gasnet_puts`): a region of `count[0]`-byte chunks, `count[k + 1]` of them
    /// at stride level `k`, from `src` (strides `src_strides`, in bytes) to `dest`'s segment
    /// at `dst_off` (strides `dst_strides`). `count` has one entry more than each stride list;
    /// the target's chunks may not overlap (`dst_strides[0] >= count[0]`, `dst_strides[k] >=
    /// count[k] * dst_strides[k - 1]`). Blocking.
    pub fn put_strided(
        &self,
        dest: Rank,
        dst_off: u64,
        dst_strides: &[u64],
        src: &[u8],
        src_strides: &[usize],
        count: &[usize],
    ) -> Result<()> {
        const OP: &str = "put_strided";
        if let Some(base) = self.strided_direct(
            OP,
            dest,
            dst_off,
            dst_strides,
            src.len(),
            src_strides,
            count,
            true,
        )? {
            strided_pairs(dst_strides, src_strides, count, |d, s| {
                // SAFETY: `strided_direct` checked that every chunk lies inside `dest`'s
                // segment, mapped at `base` for the endpoint's life, and inside `src`.
                unsafe {
                    crate::mem::copy(src[s..].as_ptr(), base.add(seg_off(dst_off + d)), count[0]);
                }
            });
            return Ok(());
        }
        let (r, pieces) =
            self.strided_put_lists(OP, dest, dst_off, dst_strides, src, src_strides, count)?;
        let local: Vec<&[u8]> = pieces.iter().map(|&(a, n)| &src[a..a + n]).collect();
        self.vis_put_blocking(OP, dest, &r, &local)
    }

    /// [`put_strided`](Self::put_strided) with an explicit handle (`src` consumed on return).
    pub fn put_strided_nb(
        &self,
        dest: Rank,
        dst_off: u64,
        dst_strides: &[u64],
        src: &[u8],
        src_strides: &[usize],
        count: &[usize],
    ) -> Result<Handle> {
        let (r, pieces) = self.strided_put_lists(
            "put_strided_nb",
            dest,
            dst_off,
            dst_strides,
            src,
            src_strides,
            count,
        )?;
        let local: Vec<&[u8]> = pieces.iter().map(|&(a, n)| &src[a..a + n]).collect();
        Ok(Handle {
            op: self.vis_put_start("put_strided_nb", dest, &r, &local)?,
        })
    }

    /// Strided get (`gasnet_gets`): the region at `src_off` of `src_rank`'s segment (strides
    /// `src_strides`) into `dst` (strides `dst_strides`, whose chunks may not overlap). Blocking.
    pub fn get_strided(
        &self,
        src_rank: Rank,
        src_off: u64,
        src_strides: &[u64],
        dst: &mut [u8],
        dst_strides: &[usize],
        count: &[usize],
    ) -> Result<()> {
        const OP: &str = "get_strided";
        if let Some(base) = self.strided_direct(
            OP,
            src_rank,
            src_off,
            src_strides,
            dst.len(),
            dst_strides,
            count,
            false,
        )? {
            strided_pairs(src_strides, dst_strides, count, |r, d| {
                // SAFETY: `strided_direct` checked that every chunk lies inside `src_rank`'s
                // segment, mapped at `base` for the endpoint's life, and inside `dst`, which
                // is borrowed exclusively.
                unsafe {
                    crate::mem::copy(
                        base.add(seg_off(src_off + r)),
                        dst[d..].as_mut_ptr(),
                        count[0],
                    );
                }
            });
            return Ok(());
        }
        let (extent, _) = strided_extent(OP, "target side", src_strides, count, false)?;
        self.check_extent(OP, src_rank, src_off, extent)?;
        let pieces = strided_local(OP, dst.len(), dst_strides, count, true)?;
        let r = if count.contains(&0) {
            Vec::new()
        } else {
            strided_ranges(src_off, src_strides, count)
        };
        // Exclusive, disjoint pieces of `dst`, in order.
        let mut local: Vec<&mut [u8]> = Vec::with_capacity(pieces.len());
        let mut rest: &mut [u8] = dst;
        let mut base = 0usize;
        for &(a, n) in &pieces {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(a - base);
            let (piece, tail) = tail.split_at_mut(n);
            local.push(piece);
            rest = tail;
            base = a + n;
        }
        self.vis_get(OP, src_rank, &r, &mut local)
    }

    /// [`get_strided`](Self::get_strided) with an explicit handle, into this rank's own
    /// segment: the region at `src_off` of `src_rank`'s segment (strides `src_strides`) into
    /// the region at `dst_off` of the local segment (strides `dst_strides`, whose chunks may
    /// not overlap), both of `count`. The handle completes when every byte is in place.
    pub fn get_strided_nb_local(
        &self,
        src_rank: Rank,
        src_off: u64,
        src_strides: &[u64],
        dst_off: u64,
        dst_strides: &[u64],
        count: &[usize],
    ) -> Result<Handle> {
        const OP: &str = "get_strided_nb_local";
        let (extent, _) = strided_extent(OP, "target side", src_strides, count, false)?;
        self.check_extent(OP, src_rank, src_off, extent)?;
        let (lext, _) = strided_extent(OP, "local side", dst_strides, count, true)?;
        if lext > 0 {
            let len = usize::try_from(lext).unwrap_or(usize::MAX);
            check_local(
                self.attached_for(OP)?,
                OP,
                self.rank(),
                &[Range { off: dst_off, len }],
            )?;
        }
        let (r, l) = if count.contains(&0) {
            (Vec::new(), Vec::new())
        } else {
            (
                strided_ranges(src_off, src_strides, count),
                strided_ranges(dst_off, dst_strides, count),
            )
        };
        self.vis_get_nb_local(OP, src_rank, &r, &l)
    }

    /// The direct path of a strided put (`put`) or get: where `rank`'s segment is mapped
    /// here, checks both sides (the written one may not overlap itself) and returns the
    /// segment's base; None where the operation takes another path (nothing checked yet).
    #[allow(clippy::too_many_arguments)]
    fn strided_direct(
        &self,
        op: &'static str,
        rank: Rank,
        off: u64,
        remote_strides: &[u64],
        local_len: usize,
        local_strides: &[usize],
        count: &[usize],
        put: bool,
    ) -> Result<Option<*mut u8>> {
        let att = self.attached_for(op)?;
        att.check_rank(rank)?;
        let Some(base) = att.peers[rank as usize] else {
            return Ok(None);
        };
        crate::endpoint::not_in_handler(op)?;
        let (extent, _) = strided_extent(op, "target side", remote_strides, count, put)?;
        let l64: Vec<u64> = local_strides.iter().map(|&s| s as u64).collect();
        let (lext, _) = strided_extent(op, "local side", &l64, count, !put)?;
        if lext > local_len as u64 {
            return Err(Error::Usage {
                op,
                detail: format!(
                    "local side: the strided region spans {lext} bytes, the buffer holds \
                     {local_len}"
                ),
            });
        }
        if extent > 0 {
            check_ranges(
                att,
                op,
                rank,
                &[Range {
                    off,
                    len: usize::try_from(extent).unwrap_or(usize::MAX),
                }],
            )?;
        }
        let bytes = if count.contains(&0) {
            0
        } else {
            count.iter().product::<usize>()
        };
        let b = self.stats_block();
        if put {
            b.add(Ctr::Puts, 1);
            b.add(Ctr::PutBytes, bytes as u64);
        } else {
            b.add(Ctr::Gets, 1);
            b.add(Ctr::GetBytes, bytes as u64);
        }
        Ok(Some(base.0))
    }

    /// The target ranges and local pieces of a strided put.
    #[allow(clippy::too_many_arguments)]
    fn strided_put_lists(
        &self,
        op: &'static str,
        dest: Rank,
        dst_off: u64,
        dst_strides: &[u64],
        src: &[u8],
        src_strides: &[usize],
        count: &[usize],
    ) -> Result<(Vec<Range>, Pieces)> {
        let (extent, _) = strided_extent(op, "target side", dst_strides, count, true)?;
        self.check_extent(op, dest, dst_off, extent)?;
        let pieces = strided_local(op, src.len(), src_strides, count, false)?;
        if count.contains(&0) {
            return Ok((Vec::new(), pieces));
        }
        Ok((strided_ranges(dst_off, dst_strides, count), pieces))
    }

    /// The whole strided region `[off, off + extent)` lies in `rank`'s segment (checked before
    /// its chunks are listed, so that a huge description fails instead of exhausting memory).
    fn check_extent(&self, op: &'static str, rank: Rank, off: u64, extent: u64) -> Result<()> {
        let att = self.attached_for(op)?;
        crate::endpoint::not_in_handler(op)?;
        if extent == 0 {
            return att.check_rank(rank);
        }
        let len = usize::try_from(extent).unwrap_or(usize::MAX);
        check_ranges(att, op, rank, &[Range { off, len }])
    }
}

fn to_ranges(v: &[(u64, usize)]) -> Vec<Range> {
    v.iter().map(|&(off, len)| Range { off, len }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_regions_merge_adjacent_chunks() {
        // A 3x2 tile of 4-byte chunks in rows of 16 bytes.
        let r = strided_ranges(100, &[16], &[4, 3]);
        assert_eq!(
            r,
            [
                Range { off: 100, len: 4 },
                Range { off: 116, len: 4 },
                Range { off: 132, len: 4 }
            ]
        );
        // Contiguous rows merge into one range.
        assert_eq!(
            strided_ranges(0, &[8, 16], &[8, 2, 2]),
            [Range { off: 0, len: 32 }]
        );
        // Three levels, lowest fastest.
        let mut offs = Vec::new();
        strided_chunks(&[10, 100], &[1, 2, 3], |o| offs.push(o));
        assert_eq!(offs, [0, 10, 100, 110, 200, 210]);
    }

    #[test]
    fn lockstep_offsets_follow_both_layouts() {
        let (a, b) = ([10u64, 100], [3usize, 50]);
        let count = [1, 2, 3];
        let mut pairs = Vec::new();
        strided_pairs(&a, &b, &count, |x, y| pairs.push((x, y)));
        let mut xs = Vec::new();
        strided_chunks(&a, &count, |x| xs.push(x));
        let mut ys = Vec::new();
        strided_chunks(&[3, 50], &count, |y| ys.push(usize::try_from(y).unwrap()));
        assert_eq!(pairs, xs.into_iter().zip(ys).collect::<Vec<_>>());
        let mut n = 0;
        strided_pairs(&[], &[], &[5], |_, _| n += 1);
        assert_eq!(n, 1);
        strided_pairs(&[8], &[8], &[4, 0], |_, _| n += 1);
        assert_eq!(n, 1);
    }

    #[test]
    fn strided_descriptions_are_checked() {
        assert!(
            strided_extent("t", "s", &[16], &[4], false).is_err(),
            "count too short"
        );
        assert!(
            strided_extent("t", "s", &[2], &[4, 3], true).is_err(),
            "overlap written"
        );
        assert_eq!(
            strided_extent("t", "s", &[2], &[4, 3], false).unwrap(),
            (8, 3)
        );
        assert_eq!(
            strided_extent("t", "s", &[16, 64], &[4, 4, 2], true).unwrap(),
            (116, 8)
        );
        assert!(strided_extent("t", "s", &[16, 32], &[4, 4, 2], true).is_err());
        assert_eq!(
            strided_extent("t", "s", &[16], &[4, 0], true).unwrap(),
            (0, 0)
        );
        assert!(
            strided_local("t", 100, &[16, 64], &[4, 4, 2], true).is_err(),
            "past the buffer"
        );
        assert_eq!(
            strided_local("t", 116, &[16], &[4, 2], false).unwrap(),
            [(0, 4), (16, 4)]
        );
    }

    #[test]
    fn batches_fit_the_message_and_cover_every_byte() {
        let ranges = [
            Range { off: 0, len: 10 },
            Range {
                off: 1000,
                len: 300,
            },
            Range { off: 5000, len: 7 },
        ];
        let b = batches(&ranges, 128);
        let mut covered = 0;
        let mut at_next = 0;
        for batch in &b {
            let bytes: usize = batch.iter().map(|(r, _)| RANGE_BYTES + r.len).sum();
            assert!(bytes <= 128, "{bytes}");
            for (r, at) in batch {
                assert_eq!(*at, at_next);
                at_next += r.len;
                covered += r.len;
            }
        }
        assert_eq!(covered, 317);
        let mut buf = Vec::new();
        pack_header(&b[0], &mut buf);
        let (parsed, rest) = parse_ranges(&buf, u32::try_from(b[0].len()).unwrap()).unwrap();
        assert!(rest.is_empty());
        assert_eq!(parsed, b[0].iter().map(|(r, _)| *r).collect::<Vec<_>>());
        assert!(parse_ranges(&buf[..5], 1).is_none());
    }

    #[test]
    fn spans_walk_both_lists() {
        let ranges = [Range { off: 0, len: 5 }, Range { off: 10, len: 3 }];
        let mut got = Vec::new();
        zip_spans(&ranges, &[2, 0, 6], |off, p, at, n| {
            got.push((off, p, at, n))
        });
        assert_eq!(got, [(0, 0, 0, 2), (2, 2, 0, 3), (10, 2, 3, 3)]);
    }
}
