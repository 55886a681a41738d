//! Schedules: a collective algorithm as one rank's list of rounds, each of local steps, sends
//! and receives, computed as a pure function of the call's single-valued arguments and the
//! rank's team number (the algorithm generators in `algs/`).
//!
//! A round runs in this order: its local steps (copies and combinations), then its sends
//! (each reads its range when it is issued), then it waits for all its receives, which are
//! applied in the order listed (a copy into the range, or a combination with what the range
//! holds). The next round starts once every receive of this one was applied; after the last,
//! the schedule's final local steps run. A message is named by (sender's team rank, tag);
//! generators give every (sender, tag) one message per receiver, and the receiver's schedule
//! expects exactly the bytes the sender's sends. What arrives for a later round waits in a
//! buffer until that round.
//!
//! Nothing here communicates: the engine runs schedules (`engine.rs`), and [`simulate`] runs
//! every rank's schedule of a call over an in-memory network for the tests of the generators.

/// Which local area a range lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Buf {
    /// The participant's source area.
    Src,
    /// The participant's destination area.
    Dst,
    /// The schedule's scratch buffer (`Sched::tmp` bytes, zeroed).
    Tmp,
}

/// A byte range of a local area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) buf: Buf,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

impl Range {
    pub(crate) fn new(buf: Buf, off: usize, len: usize) -> Range {
        Range { buf, off, len }
    }
}

/// A local step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Local {
    /// Copy `from` to `to` (same length; overlapping ranges are allowed).
    Copy { from: Range, to: Range },
    /// `to` (one element) = the combination of every element of `from`, in order.
    Fold { from: Range, to: Range },
    /// `to` (as long as `from`) = the inclusive prefixes of `from`'s elements, each after the
    /// `carry` element when there is one: `to[i] = carry ∘ from[0] ∘ … ∘ from[i]`.
    Scan {
        carry: Option<Range>,
        from: Range,
        to: Range,
    },
}

/// A message to team rank `to`: the bytes of `from` when the send is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Send {
    pub(crate) to: u32,
    pub(crate) tag: u32,
    pub(crate) from: Range,
}

/// How a received message is applied to its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Apply {
    /// Written into the range.
    Copy,
    /// Combined with the range: `range = message ∘ range` (the message's operands come first).
    CombineFirst,
    /// Combined with the range: `range = range ∘ message` (the range's operands come first).
    CombineAfter,
}

/// The message from team rank `from` with `tag`: `into.len` bytes, applied by `how`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recv {
    pub(crate) from: u32,
    pub(crate) tag: u32,
    pub(crate) into: Range,
    pub(crate) how: Apply,
}

/// One round of a schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Round {
    pub(crate) pre: Vec<Local>,
    pub(crate) sends: Vec<Send>,
    pub(crate) recvs: Vec<Recv>,
}

/// One rank's schedule of one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sched {
    pub(crate) rounds: Vec<Round>,
    /// Local steps after the last round.
    pub(crate) post: Vec<Local>,
    /// Bytes of scratch space.
    pub(crate) tmp: usize,
}

/// The reduction a schedule combines with.
pub(crate) trait Combine {
    /// Elementwise: `out[i] = left[i] ∘ right[i]` (equal lengths, whole elements).
    fn combine(&self, out: &mut [u8], left: &[u8], right: &[u8]);
    /// `out` (one element) = the combination of every element of `xs`, in order.
    fn fold(&self, out: &mut [u8], xs: &[u8]);
    /// `out[i] = carry ∘ xs[0] ∘ … ∘ xs[i]` (`out` as long as `xs`; no carry: from `xs[0]`).
    fn scan(&self, out: &mut [u8], carry: Option<&[u8]>, xs: &[u8]);
}

/// The combination of a call, for [`local`] and [`apply`].
pub(crate) type CombineFn<'a> = &'a dyn Combine;

/// The memory a schedule works on: its three areas, read and written by range. Every access
/// is checked against the area's length.
pub(crate) trait Mem {
    /// A copy of the bytes of `r`.
    fn read(&self, r: Range) -> Result<Vec<u8>, String>;
    /// Write `bytes` (exactly `r.len` of them) into `r`.
    fn write(&mut self, r: Range, bytes: &[u8]) -> Result<(), String>;
}

/// Run a local step.
pub(crate) fn local(m: &mut dyn Mem, l: &Local, f: CombineFn<'_>) -> Result<(), String> {
    match *l {
        Local::Copy { from, to } => {
            let v = m.read(from)?;
            m.write(to, &v)
        }
        Local::Fold { from, to } => {
            let xs = m.read(from)?;
            let mut out = vec![0u8; to.len];
            f.fold(&mut out, &xs);
            m.write(to, &out)
        }
        Local::Scan { carry, from, to } => {
            let c = carry.map(|c| m.read(c)).transpose()?;
            let xs = m.read(from)?;
            let mut out = vec![0u8; xs.len()];
            f.scan(&mut out, c.as_deref(), &xs);
            m.write(to, &out)
        }
    }
}

/// Apply a received message.
pub(crate) fn apply(m: &mut dyn Mem, r: &Recv, msg: &[u8], f: CombineFn<'_>) -> Result<(), String> {
    if msg.len() != r.into.len {
        return Err(format!(
            "{} bytes arrived from team rank {} (tag {}) where {} were expected",
            msg.len(),
            r.from,
            r.tag,
            r.into.len
        ));
    }
    match r.how {
        Apply::Copy => m.write(r.into, msg),
        Apply::CombineFirst | Apply::CombineAfter => {
            let cur = m.read(r.into)?;
            let mut out = vec![0u8; r.into.len];
            if r.how == Apply::CombineFirst {
                f.combine(&mut out, msg, &cur);
            } else {
                f.combine(&mut out, &cur, msg);
            }
            m.write(r.into, &out)
        }
    }
}

/// Three owned areas (the simulator's).
#[cfg(test)]
pub(crate) struct VecMem<'a> {
    pub(crate) src: &'a mut Vec<u8>,
    pub(crate) dst: &'a mut Vec<u8>,
    pub(crate) tmp: &'a mut Vec<u8>,
}

#[cfg(test)]
impl Mem for VecMem<'_> {
    fn read(&self, r: Range) -> Result<Vec<u8>, String> {
        let b = match r.buf {
            Buf::Src => &*self.src,
            Buf::Dst => &*self.dst,
            Buf::Tmp => &*self.tmp,
        };
        r.off
            .checked_add(r.len)
            .and_then(|e| b.get(r.off..e))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| format!("{r:?} is outside its area of {} bytes", b.len()))
    }

    fn write(&mut self, r: Range, bytes: &[u8]) -> Result<(), String> {
        let b = match r.buf {
            Buf::Src => &mut *self.src,
            Buf::Dst => &mut *self.dst,
            Buf::Tmp => &mut *self.tmp,
        };
        let n = b.len();
        r.off
            .checked_add(r.len)
            .filter(|_| bytes.len() == r.len)
            .and_then(|e| b.get_mut(r.off..e))
            .ok_or_else(|| format!("{r:?} is outside its area of {n} bytes"))?
            .copy_from_slice(bytes);
        Ok(())
    }
}

/// Run every rank's schedule over an in-memory network: `areas[t]` = (source, destination) of
/// team rank `t`. Messages are delivered in an order drawn from `seed` (any order a network may
/// produce between rounds). Returns the messages sent in all, or the first error (a schedule
/// that reads outside an area, expects what nobody sends, or deadlocks).
#[cfg(test)]
pub(crate) fn simulate(
    scheds: &[Sched],
    areas: &mut [(Vec<u8>, Vec<u8>)],
    f: CombineFn<'_>,
    seed: u64,
) -> Result<usize, String> {
    use std::collections::HashMap;
    let n = scheds.len();
    let mut tmp: Vec<Vec<u8>> = scheds.iter().map(|s| vec![0u8; s.tmp]).collect();
    let mut round = vec![0usize; n];
    let mut started = vec![false; n];
    let mut done = vec![false; n];
    // (receiver, sender, tag) -> message
    let mut inbox: HashMap<(usize, u32, u32), Vec<u8>> = HashMap::new();
    let mut in_flight: Vec<(usize, u32, u32, Vec<u8>)> = Vec::new();
    let mut rng = seed | 1;
    let mut sent = 0;
    loop {
        let mut progress = false;
        for t in 0..n {
            if done[t] {
                continue;
            }
            let (src, dst) = &mut areas[t];
            let mut a = VecMem {
                src,
                dst,
                tmp: &mut tmp[t],
            };
            let s = &scheds[t];
            if round[t] == s.rounds.len() {
                for l in &s.post {
                    local(&mut a, l, f)?;
                }
                done[t] = true;
                progress = true;
                continue;
            }
            let r = &s.rounds[round[t]];
            if !started[t] {
                for l in &r.pre {
                    local(&mut a, l, f)?;
                }
                for snd in &r.sends {
                    if snd.to as usize >= n || snd.to as usize == t {
                        return Err(format!("rank {t} sends to {}", snd.to));
                    }
                    #[allow(clippy::cast_possible_truncation)] // t < n, a u32
                    in_flight.push((snd.to as usize, t as u32, snd.tag, a.read(snd.from)?));
                    sent += 1;
                }
                started[t] = true;
                progress = true;
            }
            if r.recvs
                .iter()
                .all(|rv| inbox.contains_key(&(t, rv.from, rv.tag)))
            {
                for rv in &r.recvs {
                    let m = inbox.remove(&(t, rv.from, rv.tag)).unwrap_or_default();
                    apply(&mut a, rv, &m, f)?;
                }
                round[t] += 1;
                started[t] = false;
                progress = true;
            }
        }
        // Deliver the messages in flight in a shuffled order.
        while !in_flight.is_empty() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            #[allow(clippy::cast_possible_truncation)] // reduced modulo the length
            let i = (rng % in_flight.len() as u64) as usize;
            let (to, from, tag, m) = in_flight.swap_remove(i);
            if inbox.insert((to, from, tag), m).is_some() {
                return Err(format!("two messages from {from} to {to} with tag {tag}"));
            }
            progress = true;
        }
        if done.iter().all(|&d| d) {
            if !inbox.is_empty() {
                return Err(format!("{} messages never received", inbox.len()));
            }
            return Ok(sent);
        }
        if !progress {
            let stuck: Vec<(usize, usize)> = (0..n)
                .filter(|&t| !done[t])
                .map(|t| (t, round[t]))
                .collect();
            return Err(format!("deadlock: (rank, round) waiting {stuck:?}"));
        }
    }
}
