//! A sequential oracle for the collectives: given one operation and every participant's
//! source (and initial destination) bytes, what every participant's destination must hold
//! afterwards. Written from the reference semantics, independently of `amnet-coll`'s plan.

/// The operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OKind {
    /// Root's bytes to every participant.
    Broadcast,
    /// Block `i` of the root's source to participant `i`.
    Scatter,
    /// Participant `i`'s bytes to block `i` of the root's destination.
    Gather,
    /// Gather to every participant.
    GatherAll,
    /// All-to-all.
    Exchange,
    /// Reduction to the root.
    Reduce,
    /// Reduction to every participant.
    ReduceAll,
    /// Inclusive prefix reduction.
    Prefix,
    /// Exclusive prefix reduction.
    ExPrefix,
    /// Vector reduction to the root: `n` elements per participant, elementwise.
    ReduceElems,
    /// Vector reduction to every participant.
    ReduceElemsAll,
    /// Inclusive vector scan over the participants.
    ScanElems,
    /// Exclusive vector scan (participant 0's destination unchanged).
    ExScanElems,
}

impl OKind {
    /// Whether it is a reduction.
    pub fn is_red(self) -> bool {
        matches!(
            self,
            OKind::Reduce | OKind::ReduceAll | OKind::Prefix | OKind::ExPrefix
        ) || self.is_vec()
    }

    /// Whether it is a vector reduction (`n` independent elements per participant).
    pub fn is_vec(self) -> bool {
        matches!(
            self,
            OKind::ReduceElems | OKind::ReduceElemsAll | OKind::ScanElems | OKind::ExScanElems
        )
    }
}

/// A reduction function the oracle knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OFn {
    /// Wrapping u64 sum (8-byte elements).
    SumU64,
    /// Composition of affine maps `x -> a*x + b` on wrapping u64 (16-byte elements `(a, b)`);
    /// `x op y` applies `x` first, then `y`. Associative, not commutative.
    Affine,
}

impl OFn {
    /// Element size.
    pub fn es(self) -> usize {
        match self {
            OFn::SumU64 => 8,
            OFn::Affine => 16,
        }
    }
}

/// `x op y` for affine elements (16 bytes each, native-endian `(a, b)`).
pub fn affine(x: &[u8], y: &[u8]) -> [u8; 16] {
    let g = |s: &[u8], i: usize| u64::from_ne_bytes(s[i * 8..i * 8 + 8].try_into().unwrap());
    let (a1, b1, a2, b2) = (g(x, 0), g(x, 1), g(y, 0), g(y, 1));
    let a = a2.wrapping_mul(a1);
    let b = a2.wrapping_mul(b1).wrapping_add(b2);
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&a.to_ne_bytes());
    r[8..].copy_from_slice(&b.to_ne_bytes());
    r
}

fn combine(f: OFn, x: &[u8], y: &[u8]) -> Vec<u8> {
    match f {
        OFn::SumU64 => {
            let a = u64::from_ne_bytes(x[..8].try_into().unwrap());
            let b = u64::from_ne_bytes(y[..8].try_into().unwrap());
            a.wrapping_add(b).to_ne_bytes().to_vec()
        }
        OFn::Affine => affine(x, y).to_vec(),
    }
}

/// A block-cyclic layout (same meaning as `amnet::coll::Layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OLay {
    /// Block size; 0 = every element on participant `off`.
    pub blk: usize,
    /// First global element (blk > 0) or the participant (blk == 0).
    pub off: usize,
}

impl OLay {
    /// Where element `k` lives: (participant, element slot in its area).
    pub fn place(self, k: usize, np: usize) -> (usize, usize) {
        if self.blk == 0 {
            return (self.off, k);
        }
        let g = self.off + k;
        let b = g / self.blk;
        (b % np, (b / np) * self.blk + g % self.blk)
    }

    /// Element slots participant `p`'s area holds for `n` elements.
    pub fn area_elems(self, n: usize, np: usize, p: usize) -> usize {
        (0..n)
            .map(|k| self.place(k, np))
            .filter(|&(q, _)| q == p)
            .map(|(_, s)| s + 1)
            .max()
            .unwrap_or(0)
    }
}

/// One collective, single-valued.
#[derive(Debug, Clone)]
pub struct ODesc {
    /// Operation.
    pub kind: OKind,
    /// Participants.
    pub np: usize,
    /// Root participant (rooted operations).
    pub root: usize,
    /// Byte counts: broadcast `[n]`; scatter/gather/gather_all per participant; exchange
    /// `np x np` row-major (row = source). Empty for reductions.
    pub counts: Vec<usize>,
    /// Reduction function.
    pub func: OFn,
    /// Element count (vector reductions: elements per participant).
    pub n: usize,
    /// Source layout.
    pub src_lay: OLay,
    /// Destination layout (prefix reductions; the source layout otherwise).
    pub dst_lay: OLay,
    /// Sources taken from the destinations (in-place forms).
    pub in_place: bool,
}

fn prefix(v: &[usize]) -> Vec<usize> {
    let mut acc = 0;
    v.iter()
        .map(|&x| {
            let d = acc;
            acc += x;
            d
        })
        .collect()
}

impl ODesc {
    fn m(&self, p: usize, q: usize) -> usize {
        self.counts[p * self.np + q]
    }

    /// Bytes of participant `p`'s source area.
    pub fn src_len(&self, p: usize) -> usize {
        let es = self.func.es();
        match self.kind {
            OKind::Broadcast => {
                if p == self.root {
                    self.counts[0]
                } else {
                    0
                }
            }
            OKind::Scatter => {
                if p == self.root {
                    self.counts.iter().sum()
                } else {
                    0
                }
            }
            OKind::Gather | OKind::GatherAll => self.counts[p],
            OKind::Exchange => (0..self.np).map(|q| self.m(p, q)).sum(),
            k if k.is_vec() => self.n * es,
            _ => self.src_lay.area_elems(self.n, self.np, p) * es,
        }
    }

    /// Bytes of participant `p`'s destination area (what the call may write).
    pub fn dst_len(&self, p: usize) -> usize {
        let es = self.func.es();
        match self.kind {
            OKind::Broadcast => self.counts[0],
            OKind::Scatter => self.counts[p],
            OKind::Gather => {
                if p == self.root {
                    self.counts.iter().sum()
                } else {
                    0
                }
            }
            OKind::GatherAll => self.counts.iter().sum(),
            OKind::Exchange => (0..self.np).map(|i| self.m(i, p)).sum(),
            OKind::Reduce => {
                if p == self.root {
                    es
                } else {
                    0
                }
            }
            OKind::ReduceAll => es,
            OKind::Prefix | OKind::ExPrefix => self.dst_lay.area_elems(self.n, self.np, p) * es,
            OKind::ReduceElems => {
                if p == self.root {
                    self.n * es
                } else {
                    0
                }
            }
            OKind::ReduceElemsAll | OKind::ScanElems | OKind::ExScanElems => self.n * es,
        }
    }

    /// Where an in-place source of `p` starts in its destination.
    pub fn in_place_off(&self, p: usize) -> usize {
        match self.kind {
            OKind::Gather | OKind::GatherAll => prefix(&self.counts)[p],
            _ => 0,
        }
    }

    /// Every participant's expected destination bytes, from every participant's source and
    /// initial destination bytes (`dst_init[p]` may be longer than the area: the extra bytes
    /// are guards that must stay as they were). With `in_place`, a participant's source is
    /// read from its initial destination and `srcs[p]` is ignored.
    pub fn expect(&self, srcs: &[Vec<u8>], dst_init: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let np = self.np;
        let src: Vec<Vec<u8>> = (0..np)
            .map(|p| {
                let len = self.src_len(p);
                if self.in_place && len > 0 && self.dst_len(p) > 0 {
                    let o = self.in_place_off(p);
                    dst_init[p][o..o + len].to_vec()
                } else {
                    srcs[p][..len].to_vec()
                }
            })
            .collect();
        let mut out: Vec<Vec<u8>> = dst_init.to_vec();
        match self.kind {
            OKind::Broadcast => {
                let n = self.counts[0];
                for d in out.iter_mut() {
                    d[..n].copy_from_slice(&src[self.root][..n]);
                }
            }
            OKind::Scatter => {
                let d = prefix(&self.counts);
                for (q, o) in out.iter_mut().enumerate() {
                    let c = self.counts[q];
                    o[..c].copy_from_slice(&src[self.root][d[q]..d[q] + c]);
                }
            }
            OKind::Gather | OKind::GatherAll => {
                let d = prefix(&self.counts);
                for (q, o) in out.iter_mut().enumerate() {
                    if self.kind == OKind::Gather && q != self.root {
                        continue;
                    }
                    for (p, sp) in src.iter().enumerate() {
                        let c = self.counts[p];
                        o[d[p]..d[p] + c].copy_from_slice(&sp[..c]);
                    }
                }
            }
            OKind::Exchange => {
                for (q, o) in out.iter_mut().enumerate() {
                    let mut at = 0;
                    for (p, sp) in src.iter().enumerate() {
                        let so: usize = (0..q).map(|j| self.m(p, j)).sum();
                        let c = self.m(p, q);
                        o[at..at + c].copy_from_slice(&sp[so..so + c]);
                        at += c;
                    }
                }
            }
            k if k.is_vec() => {
                // Element i of participant q's result: src_0[i] op ... op src_last[i] over
                // the participants the operation takes (all; scans: up to q, or before q).
                let es = self.func.es();
                let fold = |last: usize, i: usize| {
                    let r = i * es..(i + 1) * es;
                    (1..=last).fold(src[0][r.clone()].to_vec(), |acc, p| {
                        combine(self.func, &acc, &src[p][r.clone()])
                    })
                };
                for (q, o) in out.iter_mut().enumerate() {
                    let last = match k {
                        OKind::ReduceElems if q != self.root => continue,
                        OKind::ScanElems => q,
                        OKind::ExScanElems if q == 0 => continue,
                        OKind::ExScanElems => q - 1,
                        _ => np - 1,
                    };
                    for i in 0..self.n {
                        o[i * es..(i + 1) * es].copy_from_slice(&fold(last, i));
                    }
                }
            }
            _ => {
                let es = self.func.es();
                let x: Vec<&[u8]> = (0..self.n)
                    .map(|k| {
                        let (p, s) = self.src_lay.place(k, np);
                        &src[p][s * es..(s + 1) * es]
                    })
                    .collect();
                // acc[k] = x_0 op ... op x_k
                let mut acc: Vec<Vec<u8>> = Vec::with_capacity(self.n);
                for k in 0..self.n {
                    let v = if k == 0 {
                        x[0].to_vec()
                    } else {
                        combine(self.func, &acc[k - 1], x[k])
                    };
                    acc.push(v);
                }
                let total = &acc[self.n - 1];
                match self.kind {
                    OKind::Reduce => out[self.root][..es].copy_from_slice(total),
                    OKind::ReduceAll => {
                        for o in out.iter_mut() {
                            o[..es].copy_from_slice(total);
                        }
                    }
                    _ => {
                        for k in 0..self.n {
                            if self.kind == OKind::ExPrefix && k == 0 {
                                continue;
                            }
                            let v = if self.kind == OKind::Prefix {
                                &acc[k]
                            } else {
                                &acc[k - 1]
                            };
                            let (p, s) = self.dst_lay.place(k, np);
                            out[p][s * es..(s + 1) * es].copy_from_slice(v);
                        }
                    }
                }
            }
        }
        out
    }
}

/// Compare `got` with `want`; describe the first difference.
pub fn diff(what: &str, got: &[u8], want: &[u8]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} bytes, expected {}",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => {
            let bad = got.iter().zip(want).filter(|(a, b)| a != b).count();
            let lo = i.saturating_sub(4);
            let hi = (i + 12).min(got.len());
            Err(format!(
                "{what}: byte {i} of {} differs ({bad} bad bytes); got {:02x?} expected {:02x?} at {lo}..{hi}",
                got.len(),
                &got[lo..hi],
                &want[lo..hi]
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn prefix_sum_block_cyclic() {
        // 3 participants, cyclic blocks of 1 from element 0: element k on k % 3.
        let d = ODesc {
            kind: OKind::Prefix,
            np: 3,
            root: 0,
            counts: vec![],
            func: OFn::SumU64,
            n: 5,
            src_lay: OLay { blk: 1, off: 0 },
            dst_lay: OLay { blk: 0, off: 2 },
            in_place: false,
        };
        let srcs = vec![u(&[1, 4]), u(&[2, 5]), u(&[3])];
        let init = vec![vec![0; 8]; 3];
        let mut init2 = init.clone();
        init2[2] = vec![0; 40];
        let out = d.expect(&srcs, &init2);
        assert_eq!(out[2], u(&[1, 3, 6, 10, 15]));
        assert_eq!(out[0], vec![0; 8]);
    }

    #[test]
    fn vector_scans_are_elementwise() {
        let d = ODesc {
            kind: OKind::ScanElems,
            np: 3,
            root: 0,
            counts: vec![],
            func: OFn::SumU64,
            n: 2,
            src_lay: OLay { blk: 1, off: 0 },
            dst_lay: OLay { blk: 1, off: 0 },
            in_place: false,
        };
        let srcs = vec![u(&[1, 10]), u(&[2, 20]), u(&[3, 30])];
        let init = vec![u(&[7, 7]); 3];
        assert_eq!(
            d.expect(&srcs, &init),
            vec![u(&[1, 10]), u(&[3, 30]), u(&[6, 60])]
        );
        let ex = ODesc {
            kind: OKind::ExScanElems,
            ..d.clone()
        };
        assert_eq!(
            ex.expect(&srcs, &init),
            vec![u(&[7, 7]), u(&[1, 10]), u(&[3, 30])]
        );
        let red = ODesc {
            kind: OKind::ReduceElems,
            root: 1,
            ..d
        };
        let mut init2 = init.clone();
        init2[0] = Vec::new();
        init2[2] = Vec::new();
        assert_eq!(
            red.expect(&srcs, &init2),
            vec![Vec::new(), u(&[6, 60]), Vec::new()]
        );
    }

    #[test]
    fn affine_is_not_commutative() {
        let x = affine(&u(&[2, 1]), &u(&[3, 5]));
        let y = affine(&u(&[3, 5]), &u(&[2, 1]));
        assert_ne!(x, y);
        // (2x+1) then 3x+5: 6x + 8
        assert_eq!(x.to_vec(), u(&[6, 8]));
    }

    #[test]
    fn exchange_transposes() {
        let d = ODesc {
            kind: OKind::Exchange,
            np: 2,
            root: 0,
            counts: vec![1, 2, 1, 1],
            func: OFn::SumU64,
            n: 0,
            src_lay: OLay { blk: 1, off: 0 },
            dst_lay: OLay { blk: 1, off: 0 },
            in_place: false,
        };
        let out = d.expect(&[vec![1, 2, 3], vec![4, 5]], &[vec![0; 2], vec![0; 3]]);
        assert_eq!(out, vec![vec![1, 4], vec![2, 3, 5]]);
    }
}
