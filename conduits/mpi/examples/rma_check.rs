//! Checks the mpi conduit's put/get as a real MPI job.
//!
//! ```sh
//! AMNET_VERBOSE=1 mpirun -n 2 target/release/examples/rma_check [native|am] [--bench ITERS]
//! ```
//!
//! Every rank checks that put/get reach every peer on the expected path (`native`, the
//! default: MPI one-sided; `am`: the core's AM path, as with `AMNET_RMA=am`), then moves every
//! size from 1 B to 4 MiB (powers of four and their neighbours) at unaligned offsets, with
//! each form of put and get: blocking, explicit handles (`wait_sync`, `try_sync`,
//! `wait_sync_all`) and implicit handles (`wait_sync_nbi`, an access region). After every
//! completed put it sends the target a Short request whose handler checks that the bytes are
//! already in its segment (a completed put is visible to an active message sent after it),
//! and after a barrier the target checks them again. Gets are checked against the bytes the
//! peer put, puts and gets to the rank itself against its own. On the native path no put or
//! get may travel as an active message: the statistics must show no Long request and no
//! Medium reply. It ends with code 0 when everything passed and 1 otherwise.
//!
//! `--bench ITERS` then times ITERS blocking 8-byte puts and gets from rank 0 to rank 1 and
//! prints the mean latency of each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use amnet::{Endpoint, Handle, HandlerTable, RmaPath, Token};
use amnet_mpi::MpiConduit;

/// Request: check `[seed, size, offset]` landed in the local segment; replies `H_VERDICT`.
const H_CHECK: u8 = 210;
/// Reply: `[1]` when the bytes were there, `[0]` otherwise.
const H_VERDICT: u8 = 211;

const MAX: usize = 4 << 20;
/// Where blocking puts land (unaligned).
const OFF_A: u64 = 3;
/// Where non-blocking puts land.
const OFF_B: u64 = (4 << 20) + 11;
/// Where gets into the local segment land, and puts to the rank itself.
const OFF_C: u64 = (8 << 20) + 17;
const SEG: usize = 13 << 20;

fn sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (1..=9).collect();
    let mut p = 16;
    while p <= MAX {
        v.extend([p - 1, p, p + 1].into_iter().filter(|&s| s <= MAX));
        p *= 4;
    }
    v.push(MAX);
    v.sort_unstable();
    v.dedup();
    v
}

fn pattern(seed: u32, i: usize) -> u8 {
    let x = u64::from(seed)
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add((i as u64).wrapping_mul(0x0100_0193));
    (x ^ (x >> 13)).to_le_bytes()[0]
}

fn filled(seed: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(seed, i)).collect()
}

fn first_bad(seed: u32, data: &[u8]) -> Option<usize> {
    data.iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern(seed, i))
        .map(|(i, _)| i)
}

/// A seed per (rank, size, form), so that a stale byte of an earlier step never passes.
fn seed(rank: u32, size: usize, form: u32) -> u32 {
    let s = u32::try_from(size).unwrap_or(u32::MAX);
    rank.wrapping_mul(1_000_003)
        .wrapping_add(s.wrapping_mul(31))
        .wrapping_add(form)
}

#[derive(Default)]
struct State {
    verdicts: AtomicU64,
    bad: AtomicU64,
    errors: Mutex<Vec<String>>,
}

impl State {
    fn fail(&self, what: String) {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }
}

fn handlers(st: &Arc<State>) -> Result<HandlerTable, String> {
    let mut t = HandlerTable::new();
    let s = st.clone();
    t.register(
        H_CHECK,
        move |tok: &mut Token<'_>, args: &[u32], _: &[u8]| {
            let [seed, size, off] = *args else {
                s.fail("check request with the wrong arguments".into());
                return;
            };
            let mut got = vec![0u8; size as usize];
            let ok = tok.endpoint().read_local(u64::from(off), &mut got).is_ok()
                && first_bad(seed, &got).is_none();
            if let Err(e) = tok.reply_short(H_VERDICT, &[u32::from(ok)]) {
                s.fail(format!("reply: {e}"));
            }
        },
    )
    .map_err(|e| e.to_string())?;
    let s = st.clone();
    t.register(
        H_VERDICT,
        move |_: &mut Token<'_>, args: &[u32], _: &[u8]| {
            if args.first() != Some(&1) {
                s.bad.fetch_add(1, Ordering::Relaxed);
            }
            s.verdicts.fetch_add(1, Ordering::Relaxed);
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(t)
}

struct Ctx<'a> {
    ep: &'a Endpoint,
    st: &'a State,
    me: u32,
    next: u32,
    prev: u32,
}

impl Ctx<'_> {
    /// Ask `next` whether the bytes of `seed` are at `off` in its segment now.
    fn ask(&self, seed: u32, size: usize, off: u64, what: &str) -> Result<(), String> {
        let e = |e: amnet::Error| e.to_string();
        let before = self.st.verdicts.load(Ordering::Relaxed);
        let bad = self.st.bad.load(Ordering::Relaxed);
        let args = [
            seed,
            u32::try_from(size).map_err(|_| "size")?,
            u32::try_from(off).map_err(|_| "offset")?,
        ];
        self.ep
            .request_short(self.next, H_CHECK, &args)
            .map_err(e)?;
        self.ep
            .wait_until(|| self.st.verdicts.load(Ordering::Relaxed) > before)
            .map_err(e)?;
        if self.st.bad.load(Ordering::Relaxed) != bad {
            return Err(format!(
                "{what} of {size} B to rank {}: not in its segment when the next active \
                 message ran",
                self.next
            ));
        }
        Ok(())
    }

    /// After a barrier: the bytes `prev` put with `form` are at `off` here.
    fn landed(&self, size: usize, form: u32, off: u64, what: &str) -> Result<(), String> {
        let mut got = vec![0u8; size];
        self.ep
            .read_local(off, &mut got)
            .map_err(|e| e.to_string())?;
        match first_bad(seed(self.prev, size, form), &got) {
            None => Ok(()),
            Some(j) => Err(format!(
                "{what} of {size} B from rank {} at offset {off}: byte {j} is wrong after the \
                 barrier",
                self.prev
            )),
        }
    }

    fn own(&self, got: &[u8], form: u32, what: &str) -> Result<(), String> {
        match first_bad(seed(self.me, got.len(), form), got) {
            None => Ok(()),
            Some(j) => Err(format!("{what} of {} B: byte {j} is wrong", got.len())),
        }
    }

    fn one_size(&self, size: usize) -> Result<(), String> {
        let ep = self.ep;
        let e = |e: amnet::Error| e.to_string();
        let (next, me) = (self.next, self.me);

        // Blocking put, an active message after it, a barrier, then a blocking get.
        let a = filled(seed(me, size, 1), size);
        ep.put(next, OFF_A, &a).map_err(e)?;
        self.ask(seed(me, size, 1), size, OFF_A, "put")?;
        ep.barrier().map_err(e)?;
        self.landed(size, 1, OFF_A, "put")?;
        let mut back = vec![0u8; size];
        ep.get(next, OFF_A, &mut back).map_err(e)?;
        self.own(&back, 1, "get")?;

        // Explicit handles: put_nb synced by wait_sync or try_sync.
        let b = filled(seed(me, size, 2), size);
        let mut h = ep.put_nb(next, OFF_B, &b).map_err(e)?;
        if size % 2 == 0 {
            ep.wait_sync(&mut h).map_err(e)?;
        } else {
            while !ep.try_sync(&mut h).map_err(e)? {
                std::hint::spin_loop();
            }
        }
        if !h.is_invalid() {
            return Err("a synced handle is still valid".into());
        }
        self.ask(seed(me, size, 2), size, OFF_B, "put_nb")?;
        // get_nb into memory of ours and get_nb_local into the segment, synced together.
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` outlives the wait_sync_all below and is untouched until then.
        let h1 = unsafe { ep.get_nb(next, OFF_B, buf.as_mut_ptr(), size) }.map_err(e)?;
        let h2 = ep.get_nb_local(next, OFF_B, OFF_C, size).map_err(e)?;
        let mut hs = [h1, h2, Handle::INVALID];
        ep.wait_sync_all(&mut hs).map_err(e)?;
        self.own(&buf, 2, "get_nb")?;
        let mut local = vec![0u8; size];
        ep.read_local(OFF_C, &mut local).map_err(e)?;
        self.own(&local, 2, "get_nb_local")?;
        ep.barrier().map_err(e)?;
        self.landed(size, 2, OFF_B, "put_nb")?;
        ep.barrier().map_err(e)?;

        // Implicit handles: put_nbi synced by wait_sync_nbi, gets in an access region.
        let c = filled(seed(me, size, 3), size);
        ep.put_nbi(next, OFF_A, &c).map_err(e)?;
        ep.wait_sync_nbi().map_err(e)?;
        self.ask(seed(me, size, 3), size, OFF_A, "put_nbi")?;
        ep.begin_nbi_region().map_err(e)?;
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` outlives the wait_sync of the region's handle below.
        unsafe { ep.get_nbi(next, OFF_A, buf.as_mut_ptr(), size) }.map_err(e)?;
        ep.get_nbi_local(next, OFF_A, OFF_C, size).map_err(e)?;
        let mut h = ep.end_nbi_region().map_err(e)?;
        ep.wait_sync(&mut h).map_err(e)?;
        self.own(&buf, 3, "get_nbi")?;
        ep.read_local(OFF_C, &mut local).map_err(e)?;
        self.own(&local, 3, "get_nbi_local")?;
        ep.barrier().map_err(e)?;
        self.landed(size, 3, OFF_A, "put_nbi")?;

        // The rank itself: its own region C, untouched by peers from here to the barrier.
        let d = filled(seed(me, size, 4), size);
        ep.put(me, OFF_C, &d).map_err(e)?;
        let mut back = vec![0u8; size];
        ep.get(me, OFF_C, &mut back).map_err(e)?;
        self.own(&back, 4, "put/get to itself")?;
        ep.barrier().map_err(e)?;
        Ok(())
    }
}

fn bench(ep: &Endpoint, iters: u32) -> Result<(), String> {
    let e = |e: amnet::Error| e.to_string();
    ep.barrier().map_err(e)?;
    if ep.rank() == 0 && ep.size() > 1 {
        let mut buf = [7u8; 8];
        for _ in 0..iters.min(1000) {
            ep.put(1, 64, &buf).map_err(e)?;
            ep.get(1, 64, &mut buf).map_err(e)?;
        }
        let t = Instant::now();
        for _ in 0..iters {
            ep.put(1, 64, &buf).map_err(e)?;
        }
        let put = t.elapsed().as_secs_f64() / f64::from(iters);
        let t = Instant::now();
        for _ in 0..iters {
            ep.get(1, 64, &mut buf).map_err(e)?;
        }
        let get = t.elapsed().as_secs_f64() / f64::from(iters);
        println!(
            "rma_check: 8-byte blocking put {:.0} ns, get {:.0} ns (path {:?}, {iters} each)",
            put * 1e9,
            get * 1e9,
            ep.rma_path(1).map_err(e)?
        );
    }
    ep.barrier().map_err(e)
}

fn main() -> Result<(), String> {
    let mut want = RmaPath::Native;
    let mut iters = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "native" => want = RmaPath::Native,
            "am" => want = RmaPath::Am,
            "--bench" => {
                let n = args.next().and_then(|n| n.parse().ok());
                iters = Some(n.ok_or("--bench needs a number of iterations")?);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let conduit = MpiConduit::from_env().map_err(|e| e.to_string())?;
    let ep = Endpoint::new(Box::new(conduit)).map_err(|e| e.to_string())?;
    let st = Arc::new(State::default());
    ep.attach(handlers(&st)?, SEG).map_err(|e| e.to_string())?;
    let (me, n) = (ep.rank(), ep.size());
    let ctx = Ctx {
        ep: &ep,
        st: &st,
        me,
        next: (me + 1) % n,
        prev: (me + n - 1) % n,
    };
    let mut failure = None;
    for r in 0..n {
        let path = ep.rma_path(r).map_err(|e| e.to_string())?;
        if path != want {
            failure = Some(format!("put/get to rank {r} use {path:?}, not {want:?}"));
        }
    }
    let before = ep.stats();
    let sizes = sizes();
    if failure.is_none() {
        for &size in &sizes {
            if let Err(m) = ctx.one_size(size) {
                failure = Some(m);
                break;
            }
        }
    }
    let after = ep.stats();
    let long = after.requests_sent.long - before.requests_sent.long;
    let medium_replies = after.replies_received.medium - before.replies_received.medium;
    if failure.is_none() && want == RmaPath::Native && (long != 0 || medium_replies != 0) {
        failure = Some(format!(
            "the native path sent {long} Long requests and got {medium_replies} Medium \
             replies: some put/get travelled as active messages"
        ));
    }
    if failure.is_none() && want == RmaPath::Am && long == 0 {
        failure = Some("the AM path sent no Long request".into());
    }
    let errors = st.errors.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if failure.is_none() {
        failure = errors.first().cloned();
    }
    // Agree on the verdict so that every rank leaves together (a failing rank alone would
    // end the job with code 1 while the others wait in a barrier).
    ep.barrier().map_err(|e| e.to_string())?;
    if let Some(f) = failure {
        return Err(format!("rank {me}: {f}"));
    }
    if me == 0 {
        println!(
            "rma_check: {n} ranks: put/get of {} sizes from 1 B to {MAX} B on the {want:?} path \
             passed",
            sizes.len()
        );
    }
    if let Some(iters) = iters {
        bench(&ep, iters)?;
    }
    ep.barrier().map_err(|e| e.to_string())?;
    Ok(())
}
