//! A bounded multi-producer multi-consumer queue of 4-word entries over words of shared
//! memory: the emulated device's completion queues (producers: this process and every peer
//! whose sends complete here; consumer: the owner's polls) and receive queues (producer: the
//! owner's posts; consumers: the peers whose sends take a buffer).
//!
//! Each cell holds a sequence word and four data words. A producer claims position `p` by
//! moving the enqueue counter from `p` to `p + 1` when cell `p % cap` holds sequence `p`,
//! writes the data, then publishes sequence `p + 1` (release). A consumer claims `p` when the
//! cell holds `p + 1`, reads the data, then frees the cell for lap `p + cap` by storing that
//! sequence. A cell whose sequence is behind means full (producer) or empty (consumer). The
//! loom model is `tests::loom_ring_two_producers_one_consumer`.

use amnet_core::sync::{AtomicU64, Ordering};

/// Words of a ring's header: enqueue counter, dequeue counter, then flags of the user's.
pub(crate) const HDR_WORDS: usize = 8;
/// Words per cell: the sequence and four data words.
pub(crate) const CELL_WORDS: usize = 5;
/// Header word that the completion queue uses to record an overrun.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const HDR_OVERRUN: usize = 2;
/// Header word that holds the depth a completion queue was created with.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const HDR_DEPTH: usize = 3;

/// Words a ring of `cap` cells takes.
pub(crate) fn words(cap: usize) -> usize {
    HDR_WORDS + cap * CELL_WORDS
}

/// A view of one ring.
pub(crate) struct Ring<'a> {
    hdr: &'a [AtomicU64],
    cells: &'a [AtomicU64],
    mask: u64,
}

impl<'a> Ring<'a> {
    /// The ring over `w` (exactly [`words`]`(cap)` words), `cap` a power of two.
    pub(crate) fn new(w: &'a [AtomicU64], cap: usize) -> Ring<'a> {
        debug_assert!(cap.is_power_of_two());
        debug_assert_eq!(w.len(), words(cap));
        let (hdr, cells) = w.split_at(HDR_WORDS);
        Ring {
            hdr,
            cells,
            mask: cap as u64 - 1,
        }
    }

    /// Set up a fresh ring: counters at 0, cell `i` at sequence `i`. Only before any other
    /// process or thread uses it.
    pub(crate) fn init(&self) {
        for h in self.hdr {
            h.store(0, Ordering::Relaxed);
        }
        for i in 0..=self.mask {
            self.seq(i).store(i, Ordering::Relaxed);
        }
    }

    fn seq(&self, pos: u64) -> &AtomicU64 {
        &self.cells[usize::try_from((pos & self.mask) * CELL_WORDS as u64).unwrap_or(0)]
    }

    fn data(&self, pos: u64) -> &[AtomicU64] {
        let at = usize::try_from((pos & self.mask) * CELL_WORDS as u64).unwrap_or(0);
        &self.cells[at + 1..at + CELL_WORDS]
    }

    /// A header word (`HDR_OVERRUN` and up are the user's).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn hdr(&self, i: usize) -> &AtomicU64 {
        &self.hdr[i]
    }

    /// Append `e`; false when the ring is full.
    pub(crate) fn push(&self, e: [u64; 4]) -> bool {
        let enq = &self.hdr[0];
        let mut pos = enq.load(Ordering::Relaxed);
        loop {
            let seq = self.seq(pos).load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as i64;
            if dif == 0 {
                match enq.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(now) => pos = now,
                }
            } else if dif < 0 {
                return false;
            } else {
                pos = enq.load(Ordering::Relaxed);
            }
        }
        for (w, v) in self.data(pos).iter().zip(e) {
            w.store(v, Ordering::Relaxed);
        }
        self.seq(pos).store(pos + 1, Ordering::Release);
        true
    }

    /// Take the oldest entry, if any.
    pub(crate) fn pop(&self) -> Option<[u64; 4]> {
        let deq = &self.hdr[1];
        let mut pos = deq.load(Ordering::Relaxed);
        loop {
            let seq = self.seq(pos).load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos + 1) as i64;
            if dif == 0 {
                match deq.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(now) => pos = now,
                }
            } else if dif < 0 {
                return None;
            } else {
                pos = deq.load(Ordering::Relaxed);
            }
        }
        let mut e = [0u64; 4];
        for (v, w) in e.iter_mut().zip(self.data(pos)) {
            *v = w.load(Ordering::Relaxed);
        }
        self.seq(pos).store(pos + self.mask + 1, Ordering::Release);
        Some(e)
    }

    /// Entries in the ring now (a snapshot; exact when nobody else moves it).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn len(&self) -> u64 {
        let enq = self.hdr[0].load(Ordering::Acquire);
        let deq = self.hdr[1].load(Ordering::Acquire);
        enq.saturating_sub(deq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(cap: usize) -> Vec<AtomicU64> {
        (0..words(cap)).map(|_| AtomicU64::new(0)).collect()
    }

    #[cfg(not(loom))]
    #[test]
    fn fifo_full_and_empty() {
        let m = mem(4);
        let r = Ring::new(&m, 4);
        r.init();
        assert_eq!(r.pop(), None);
        for i in 0..4u64 {
            assert!(r.push([i, i + 1, i + 2, i + 3]));
        }
        assert!(!r.push([9; 4]), "a full ring refuses");
        assert_eq!(r.len(), 4);
        for lap in 0..10u64 {
            let e = r.pop().expect("entry");
            assert_eq!(e[0], lap);
            assert_eq!(e[3], lap + 3);
            assert!(r.push([lap + 4, lap + 5, lap + 6, lap + 7]));
        }
        for _ in 0..4 {
            assert!(r.pop().is_some());
        }
        assert_eq!(r.pop(), None);
    }

    #[cfg(not(loom))]
    #[test]
    fn threads_lose_and_duplicate_nothing() {
        let m = mem(64);
        let r = Ring::new(&m, 64);
        r.init();
        let per = 20_000u64;
        let got = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..per {
                        let v = t * per + i;
                        while !r.push([v, !v, v ^ 0x55, 7]) {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (r, got) = (&r, &got);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while (mine.len() as u64) < per * 3 / 2 {
                        match r.pop() {
                            Some(e) => {
                                assert_eq!(e[1], !e[0]);
                                assert_eq!(e[2], e[0] ^ 0x55);
                                mine.push(e[0]);
                            }
                            None => std::thread::yield_now(),
                        }
                    }
                    got.lock().unwrap().extend(mine);
                });
            }
        });
        let mut all = got.into_inner().unwrap();
        all.sort_unstable();
        assert_eq!(all, (0..3 * per).collect::<Vec<_>>());
    }

    /// Two producers and a consumer: every entry arrives once, whole, and each producer's in
    /// its order.
    #[cfg(loom)]
    #[test]
    fn loom_ring_two_producers_one_consumer() {
        loom::model(|| {
            let m = std::sync::Arc::new(mem(2));
            Ring::new(&m, 2).init();
            let ps: Vec<_> = (0..2u64)
                .map(|t| {
                    let m = m.clone();
                    loom::thread::spawn(move || {
                        let r = Ring::new(&m, 2);
                        assert!(r.push([t, t + 10, t + 20, t + 30]));
                    })
                })
                .collect();
            let r = Ring::new(&m, 2);
            let check = |e: [u64; 4]| {
                assert_eq!([e[1], e[2], e[3]], [e[0] + 10, e[0] + 20, e[0] + 30]);
                e[0]
            };
            // One pop races the producers; the rest follow their end.
            let mut seen: Vec<u64> = r.pop().map(check).into_iter().collect();
            for p in ps {
                p.join().unwrap();
            }
            while let Some(e) = r.pop() {
                seen.push(check(e));
            }
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 1]);
            assert_eq!(r.pop(), None);
        });
    }
}
