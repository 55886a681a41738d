//! loom models of the shared-memory ring: every interleaving (up to the preemption bound) of
//! producers and consumers delivers each message exactly once, in order per producer, and
//! never lets a reader see a slot a writer still owns (loom checks the data cell); and the
//! doorbell that wakes a sleeping progress thread never loses a wake-up.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p amnet-smp --test loom --release`.
#![cfg(loom)]

use std::alloc::{alloc_zeroed, dealloc, Layout};

use amnet_smp::bell::Doorbell;
use amnet_smp::ring::Ring;
use loom::sync::Arc;
use loom::thread;

struct Mem(*mut u8, Layout);
// SAFETY: plain memory handed to the ring, which synchronizes its own use.
unsafe impl Send for Mem {}
// SAFETY: as above.
unsafe impl Sync for Mem {}
impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `ring`.
        unsafe { dealloc(self.0, self.1) }
    }
}

fn ring(cap: usize) -> (Arc<Mem>, Ring) {
    let l = Layout::from_size_align(Ring::bytes(cap, 8), 64).unwrap();
    // SAFETY: non-zero, 64-aligned layout.
    let m = Mem(unsafe { alloc_zeroed(l) }, l);
    // SAFETY: fresh aligned memory of the right size; cap is a power of two.
    let r = unsafe { Ring::init(m.0, cap, 8) };
    (Arc::new(m), r)
}

fn push(r: &Ring, v: u64) {
    // SAFETY: data_cap 8 holds one u64.
    while !r.try_push(|p| unsafe { p.cast::<u64>().write_unaligned(v) }) {
        thread::yield_now();
    }
}

fn pop(r: &Ring) -> u64 {
    loop {
        // SAFETY: every published slot holds a u64.
        if let Some(v) = r.try_pop(|p| unsafe { p.cast::<u64>().read_unaligned() }) {
            return v;
        }
        thread::yield_now();
    }
}

#[test]
fn spsc_wraps_in_order() {
    loom::model(|| {
        let (m, r) = ring(2);
        let p = {
            let m = m.clone();
            thread::spawn(move || {
                let _m = m;
                for v in 1..=3 {
                    push(&r, v);
                }
            })
        };
        for want in 1..=3 {
            assert_eq!(pop(&r), want);
        }
        p.join().unwrap();
        assert!(r.try_pop(|_| ()).is_none());
        drop(m);
    });
}

#[test]
fn two_producers_one_consumer() {
    loom::model(|| {
        let (m, r) = ring(2);
        let hs: Vec<_> = [11u64, 21]
            .into_iter()
            .map(|v| {
                let m = m.clone();
                thread::spawn(move || {
                    let _m = m;
                    push(&r, v);
                })
            })
            .collect();
        let mut got = vec![pop(&r), pop(&r)];
        for h in hs {
            h.join().unwrap();
        }
        got.sort_unstable();
        assert_eq!(got, vec![11, 21]);
        assert!(r.try_pop(|_| ()).is_none());
        drop(m);
    });
}

#[test]
fn one_producer_two_consumers() {
    loom::model(|| {
        let (m, r) = ring(2);
        let c = {
            let m = m.clone();
            thread::spawn(move || {
                let _m = m;
                pop(&r)
            })
        };
        push(&r, 1);
        push(&r, 2);
        let mine = pop(&r);
        let theirs = c.join().unwrap();
        let mut v = vec![mine, theirs];
        v.sort_unstable();
        assert_eq!(v, vec![1, 2]);
        drop(m);
    });
}

/// The doorbell protocol (`amnet_smp::bell`): a sender pushes and rings while the owner's
/// progress thread arms its doorbell and checks the ring. In every interleaving either the
/// check sees the message claimed (no sleep) or the sender rings (the sleep ends at once):
/// a sleeper is never left waiting while a message sits in its ring.
#[test]
fn doorbell_never_sleeps_through_a_message() {
    loom::model(|| {
        let (m, r) = ring(2);
        let bell = Arc::new(Doorbell::new());
        let sender = {
            let (m, bell) = (m.clone(), bell.clone());
            thread::spawn(move || {
                let _m = m;
                push(&r, 7);
                bell.ring()
            })
        };
        bell.arm();
        let sleeps = !r.claimed();
        let rang = sender.join().unwrap();
        assert!(
            !sleeps || rang,
            "the sleeper saw no message and the sender did not ring: a lost wake-up"
        );
        bell.rest();
        assert_eq!(pop(&r), 7);
    });
}
