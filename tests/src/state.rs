//! The suite's handlers and the state they share with the tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use amnet::{Endpoint, Error, HandlerTable, Token};

use crate::pattern;
use crate::Verdict;

/// Request, any category: checks arguments and payload against the pattern, replies to H_ACK.
pub const H_CHECK: u8 = 130;
/// Reply: counts acknowledgements.
pub const H_ACK: u8 = 131;
/// Request (Short, args [category, nargs, payload_len, seed, long_offset]): replies with that
/// category, argument count and payload.
pub const H_ECHO: u8 = 132;
/// Reply: checks an echo against what the requester expects.
pub const H_ECHO_REPLY: u8 = 133;
/// Request: tries every forbidden operation from handler context and records the errors.
pub const H_RULES: u8 = 134;
/// Reply: tries to reply from a reply handler.
pub const H_RULES_REPLY: u8 = 135;
/// Request: a hop of the request/reply chain.
pub const H_CHAIN: u8 = 136;
/// Request: counts storm messages.
pub const H_STORM: u8 = 137;
/// Request (Medium, to rank 0): one rank's verdict on a test.
pub const H_RESULT: u8 = 138;
/// Request: calls exit(args[0]).
pub const H_EXIT: u8 = 139;
/// Request: replies to H_EXIT_IN_REPLY with args[0].
pub const H_EXIT_VIA_REPLY: u8 = 140;
/// Reply: calls exit(args[0]).
pub const H_EXIT_IN_REPLY: u8 = 141;
/// Request: counts, no reply.
pub const H_COUNT: u8 = 142;
/// Request: tries collectives from handler context and records the errors in `rules`.
pub const H_COLL_RULES: u8 = 143;
/// Request `[word, value_lo, value_hi]`: xors the value into u64 `word` of this rank's
/// segment from `SEG_WORDS_OFF` through the safe atomic view, and counts.
pub const H_SEG_XOR: u8 = 144;
/// Where `H_SEG_XOR`'s words begin.
pub const SEG_WORDS_OFF: u64 = (9 << 20) + (256 << 10);
/// A handler index nobody registers.
pub const H_UNREGISTERED: u8 = 250;

/// What a requester expects back from an echo.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// 0 Short, 1 Medium, 2 Long.
    pub category: u32,
    /// Argument count.
    pub nargs: usize,
    /// Payload length.
    pub plen: usize,
    /// Pattern seed.
    pub seed: u32,
}

/// Shared between the tests and the handlers of one rank.
#[derive(Debug)]
pub struct State {
    /// Requests checked by H_CHECK (and counted by H_COUNT).
    pub hits: AtomicU64,
    /// Acknowledgements received.
    pub acks: AtomicU64,
    /// Problems found in handlers.
    pub errors: Mutex<Vec<String>>,
    /// Echo expectations, by responder rank.
    pub expect: Mutex<Vec<Option<Expect>>>,
    /// Echo replies received.
    pub echoes: AtomicU64,
    /// Outcomes of the handler-context rule checks.
    pub rules: Mutex<Vec<String>>,
    /// Rule-check handlers that finished.
    pub rules_done: AtomicU64,
    /// The last chain hop received.
    pub chain_hop: Mutex<Option<u32>>,
    /// Storm messages received.
    pub storm: AtomicU64,
    /// Verdicts gathered on rank 0 for the current test, by rank.
    pub results: Mutex<Vec<Option<Verdict>>>,
    /// How many verdicts arrived.
    pub results_n: AtomicU64,
    /// This rank's collectives, initialized by the first collective test.
    pub coll: std::sync::OnceLock<amnet::coll::Coll>,
}

impl State {
    /// Fresh state for a job of `size` ranks.
    pub fn new(size: u32) -> Self {
        State {
            hits: AtomicU64::new(0),
            acks: AtomicU64::new(0),
            errors: Mutex::new(Vec::new()),
            expect: Mutex::new(vec![None; size as usize]),
            echoes: AtomicU64::new(0),
            rules: Mutex::new(Vec::new()),
            rules_done: AtomicU64::new(0),
            chain_hop: Mutex::new(None),
            storm: AtomicU64::new(0),
            results: Mutex::new(vec![None; size as usize]),
            results_n: AtomicU64::new(0),
            coll: std::sync::OnceLock::new(),
        }
    }

    /// Clear the per-test counters (before the test's opening barrier).
    pub fn reset(&self) {
        self.hits.store(0, Ordering::SeqCst);
        self.acks.store(0, Ordering::SeqCst);
        self.echoes.store(0, Ordering::SeqCst);
        self.storm.store(0, Ordering::SeqCst);
        self.rules_done.store(0, Ordering::SeqCst);
        lock(&self.errors).clear();
        lock(&self.rules).clear();
        *lock(&self.chain_hop) = None;
        for e in lock(&self.expect).iter_mut() {
            *e = None;
        }
    }

    /// Record a handler-side problem.
    pub fn error(&self, msg: String) {
        lock(&self.errors).push(msg);
    }

    /// The problems handlers found, as a verdict.
    pub fn handler_verdict(&self) -> Verdict {
        let e = lock(&self.errors);
        if e.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} handler check(s) failed, first: {}",
                e.len(),
                e[0]
            ))
        }
    }
}

/// Lock ignoring poison (a failed test must not wedge the rest of the suite).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn check_msg(st: &State, what: &str, src: u32, args: &[u32], payload: &[u8], seed: u32) {
    for (i, &a) in args.iter().enumerate() {
        if a != pattern::arg(seed, i) {
            st.error(format!(
                "{what} from rank {src}: argument {i} of {} is {a:#x}",
                args.len()
            ));
            return;
        }
    }
    if let Some(j) = pattern::first_bad(seed, payload) {
        st.error(format!(
            "{what} from rank {src}: payload byte {j} of {} is wrong",
            payload.len()
        ));
    }
}

/// Register every handler of the suite.
pub fn register(t: &mut HandlerTable, st: &Arc<State>) -> Result<(), Error> {
    let s = st.clone();
    t.register(
        H_CHECK,
        move |tok: &mut Token<'_>, args: &[u32], payload: &[u8]| {
            let seed = args.first().copied().unwrap_or(0);
            check_msg(&s, "request", tok.src(), args, payload, seed);
            s.hits.fetch_add(1, Ordering::SeqCst);
            if let Err(e) = tok.reply_short(H_ACK, &[]) {
                s.error(format!("reply_short from H_CHECK: {e}"));
            }
        },
    )?;
    let s = st.clone();
    t.register(H_ACK, move |_tok: &mut Token<'_>, _a: &[u32], _p: &[u8]| {
        s.acks.fetch_add(1, Ordering::SeqCst);
    })?;
    let s = st.clone();
    t.register(
        H_ECHO,
        move |tok: &mut Token<'_>, args: &[u32], _p: &[u8]| {
            let [cat, nargs, plen, seed, off] = *args else {
                s.error(format!("H_ECHO with {} arguments", args.len()));
                return;
            };
            let a = pattern::args(seed, nargs as usize);
            let p = pattern::bytes(seed, plen as usize);
            let r = match cat {
                0 => tok.reply_short(H_ECHO_REPLY, &a),
                1 => tok.reply_medium(H_ECHO_REPLY, &a, &p),
                _ => tok.reply_long(H_ECHO_REPLY, &a, &p, u64::from(off)),
            };
            if let Err(e) = r {
                s.error(format!(
                    "echo reply (category {cat}, {nargs} args, {plen} B): {e}"
                ));
            }
        },
    )?;
    let s = st.clone();
    t.register(
        H_ECHO_REPLY,
        move |tok: &mut Token<'_>, args: &[u32], p: &[u8]| {
            let exp = lock(&s.expect)[tok.src() as usize];
            match exp {
                None => s.error(format!("unexpected echo reply from rank {}", tok.src())),
                Some(x) => {
                    if args.len() != x.nargs || p.len() != x.plen {
                        s.error(format!(
                            "echo reply from rank {}: {} args {} B, expected {} args {} B",
                            tok.src(),
                            args.len(),
                            p.len(),
                            x.nargs,
                            x.plen
                        ));
                    }
                    check_msg(&s, "echo reply", tok.src(), args, p, x.seed);
                }
            }
            s.echoes.fetch_add(1, Ordering::SeqCst);
        },
    )?;
    let s = st.clone();
    t.register(
        H_RULES,
        move |tok: &mut Token<'_>, _a: &[u32], _p: &[u8]| {
            crate::rules::in_request_handler(&s, tok);
        },
    )?;
    let s = st.clone();
    t.register(
        H_RULES_REPLY,
        move |tok: &mut Token<'_>, _a: &[u32], _p: &[u8]| {
            crate::rules::in_reply_handler(&s, tok);
        },
    )?;
    let s = st.clone();
    t.register(
        H_CHAIN,
        move |tok: &mut Token<'_>, args: &[u32], _p: &[u8]| {
            *lock(&s.chain_hop) = args.first().copied();
            if let Err(e) = tok.reply_short(H_ACK, &[]) {
                s.error(format!("chain reply: {e}"));
            }
        },
    )?;
    let s = st.clone();
    t.register(
        H_STORM,
        move |tok: &mut Token<'_>, args: &[u32], _p: &[u8]| {
            if args.first() != Some(&tok.src()) {
                s.error(format!(
                    "storm message from rank {} carries {args:?}",
                    tok.src()
                ));
            }
            s.storm.fetch_add(1, Ordering::Relaxed);
        },
    )?;
    let s = st.clone();
    t.register(
        H_RESULT,
        move |tok: &mut Token<'_>, args: &[u32], p: &[u8]| {
            let ok = args.get(1) == Some(&1);
            let v = if ok {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(p).into_owned())
            };
            lock(&s.results)[tok.src() as usize] = Some(v);
            s.results_n.fetch_add(1, Ordering::SeqCst);
        },
    )?;
    t.register(
        H_EXIT,
        move |tok: &mut Token<'_>, args: &[u32], _p: &[u8]| {
            #[allow(clippy::cast_possible_wrap)]
            tok.endpoint().exit(args[0] as i32);
        },
    )?;
    let s = st.clone();
    t.register(
        H_EXIT_VIA_REPLY,
        move |tok: &mut Token<'_>, args: &[u32], _p: &[u8]| {
            if let Err(e) = tok.reply_short(H_EXIT_IN_REPLY, args) {
                s.error(format!("exit-via-reply: {e}"));
            }
        },
    )?;
    t.register(
        H_EXIT_IN_REPLY,
        move |tok: &mut Token<'_>, args: &[u32], _p: &[u8]| {
            #[allow(clippy::cast_possible_wrap)]
            tok.endpoint().exit(args[0] as i32);
        },
    )?;
    let s = st.clone();
    t.register(
        H_COLL_RULES,
        move |tok: &mut Token<'_>, _a: &[u32], _p: &[u8]| {
            crate::coll::in_handler(&s, tok);
        },
    )?;
    let s = st.clone();
    t.register(
        H_COUNT,
        move |_tok: &mut Token<'_>, _a: &[u32], _p: &[u8]| {
            s.hits.fetch_add(1, Ordering::Relaxed);
        },
    )?;
    let s = st.clone();
    t.register(
        H_SEG_XOR,
        move |tok: &mut Token<'_>, a: &[u32], _p: &[u8]| {
            let ep = tok.endpoint();
            let v = u64::from(a[1]) | u64::from(a[2]) << 32;
            match ep.segment_atomics::<std::sync::atomic::AtomicU64>(
                ep.rank(),
                SEG_WORDS_OFF + 8 * u64::from(a[0]),
                1,
            ) {
                Ok(w) => {
                    w[0].fetch_xor(v, Ordering::Relaxed);
                    s.hits.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => s.error(format!("H_SEG_XOR: {e}")),
            }
        },
    )?;
    Ok(())
}

/// Send this rank's verdict to rank 0; on rank 0, wait for every rank's and return them.
pub fn gather_verdicts(
    ep: &Endpoint,
    st: &State,
    _idx: usize,
    v: &Verdict,
) -> Result<Vec<Verdict>, Error> {
    let mut msg = match v {
        Ok(()) => Vec::new(),
        Err(e) => e.as_bytes().to_vec(),
    };
    msg.truncate(4000);
    ep.request_medium(0, H_RESULT, &[0, u32::from(v.is_ok())], &msg)?;
    if ep.rank() != 0 {
        return Ok(Vec::new());
    }
    let n = u64::from(ep.size());
    ep.wait_until(|| st.results_n.load(Ordering::SeqCst) >= n)?;
    st.results_n.store(0, Ordering::SeqCst);
    let mut r = lock(&st.results);
    Ok(r.iter_mut()
        .map(|x| x.take().unwrap_or_else(|| Err("no verdict".into())))
        .collect())
}
