//! The typed collectives: slices of [`Plain`] elements, operators as values ([`Op`]),
//! synchronization modes as values ([`SyncMode`]), and non-blocking calls whose buffers a
//! [`Scope`] lends (see [`Comm`]).
//!
//! Everything here sits on the raw core ([`raw::Collectives`](crate::raw::Collectives)): a
//! typed call is the raw call on the caller's own memory, with the element counts turned
//! into bytes, and the vector reductions (`reduce_elems`, `reduce_elems_to_all`,
//! `scan_elems`, `exclusive_scan_elems`) under the reductions.

mod op;
mod plain;
mod scope;

use amnet_core::{Error, Result};
use amnet_sync_modes::flags::{ALL_THREADS, LOCAL, SINGLE};
use amnet_sync_modes::{InSync, OutSync};

use crate::api::{call, one, red_call, usage, vred, Coll, Counts};
use crate::engine::Key;
use crate::plan::Kind;
use crate::team::Team;
use crate::types::{Addr, CollHandle};

pub use op::Op;
use op::{PanicSlot, Resolved};
pub use plain::{ElemKind, Plain};
pub use scope::{scope, Request, Scope};

/// The IN and OUT synchronization of a typed call, as a value (the raw form's flag bits,
/// `spec/coll.md` §6). The default is [`SyncMode::my`], MPI's behaviour: a call starts
/// moving data when this participant enters, and returns (or its request completes) once
/// this participant's buffers are done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncMode {
    /// When data may move (and the entry signal of `All`).
    pub input: InSync,
    /// What a completed call promises (and the exit signal of `All`).
    pub output: OutSync,
}

impl SyncMode {
    /// IN and OUT as given.
    pub const fn new(input: InSync, output: OutSync) -> SyncMode {
        SyncMode { input, output }
    }

    /// `IN_MYSYNC | OUT_MYSYNC`, the default: no signals; completion means this
    /// participant's buffers are done.
    pub const fn my() -> SyncMode {
        SyncMode::new(InSync::My, OutSync::My)
    }

    /// `IN_ALLSYNC | OUT_ALLSYNC`: data moves once every participant entered, and completion
    /// means every participant's buffers are done (two signal rounds).
    pub const fn all() -> SyncMode {
        SyncMode::new(InSync::All, OutSync::All)
    }

    /// `IN_NOSYNC | OUT_NOSYNC` (which gives the guarantees of [`SyncMode::my`] here).
    pub const fn no() -> SyncMode {
        SyncMode::new(InSync::No, OutSync::No)
    }

    /// The raw flag bits (one IN and one OUT flag).
    pub fn flags(self) -> u32 {
        use amnet_sync_modes::flags::*;
        let i = match self.input {
            InSync::No => IN_NOSYNC,
            InSync::My => IN_MYSYNC,
            InSync::All => IN_ALLSYNC,
        };
        let o = match self.output {
            OutSync::No => OUT_NOSYNC,
            OutSync::My => OUT_MYSYNC,
            OutSync::All => OUT_ALLSYNC,
        };
        i | o
    }
}

impl Default for SyncMode {
    fn default() -> SyncMode {
        SyncMode::my()
    }
}

/// A typed view of a team (rsmpi's communicator): made by [`Coll::team`] (participants are
/// the team's ranks) or [`Coll::team_images`] (participants are its images).
///
/// Every operation takes slices of a [`Plain`] type `T`; lengths are in elements, and every
/// participant passes the same lengths, roots and operator (only the buffers differ), making
/// the same calls in the same order. A blocking call returns once this participant's
/// buffers are done ([`SyncMode`]); its `_nb` form starts the call in a [`Scope`] and
/// returns a [`Request`] that borrows the buffers until the scope ends. Buffers of one call
/// are distinct slices; the `_in_place` forms use one.
///
/// # Participants and threads
///
/// - **Ranks** ([`Coll::team`]): participant `i` is team rank `i`; one thread of each rank
///   calls (in a job whose ranks host several images, one representative image thread: the
///   call is the rank's, and the other image threads make no call; calls on one team are
///   not made concurrently by two threads of a rank). A typed reduction called by one
///   representative thread in an image job therefore works.
/// - **Images** ([`Coll::team_images`]): participant `i` is team image `i` (node-major);
///   every image thread of every member calls, each with its own [`Coll`] and buffers. One
///   thread alone does not complete such a call: it waits for the other images of every
///   rank (until `AMNET_HANG_TIMEOUT` reports `Error::Hang`, if set). With one image per rank
///   both views are the same.
///
/// # Reductions
///
/// `reduce`, `reduce_to_all`, `scan` and `exclusive_scan` are elementwise (MPI's sense):
/// element `j` of a result combines element `j` of every participant's `send`, in
/// participant order, with the [`Op`]: a built-in ([`RedOp`](crate::RedOp), where `T` has an
/// entry, [`Plain::KIND`]; otherwise `Usage`) or a closure.
///
/// # Errors
///
/// A length that does not fit the call, a root out of range or an operator without an entry
/// for `T` is [`Error::Usage`] naming it, on the calling participant, before anything is
/// sent; the raw layer's checks follow (`spec/coll.md` §4). A disagreement between ranks
/// is detected by checked mode (`AMNET_COLL_CHECK=1`) or at the receiver.
///
/// # When a call ends
///
/// A blocking call, and a request's `wait` or `test` that finishes it, first detach the
/// collective from the buffers it was lent. If the wait failed (`Error::Hang` from the
/// watchdog, a failed peer) the collective goes on in library copies of those buffers, and
/// nothing writes into them afterwards: the call returns its error with the buffers free
/// (their contents unspecified), even if they lived in a stack frame that is about to go.
/// A completed collective is fenced off the same way (`spec/coll.md` §10a).
///
/// ```no_run
/// use amnet::coll::{Coll, Op, SyncMode};
///
/// fn example(coll: &Coll) -> amnet::Result<()> {
///     let world = coll.team(coll.world());
///     let (me, n) = (world.rank(), world.size());
///
///     let mut params = [0.0f64; 3];
///     if me == 0 {
///         params = [0.5, 1.5, 2.5];
///     }
///     world.broadcast(&mut params, 0)?;
///
///     // Elementwise sums of every rank's vector, to every rank.
///     let mine = [f64::from(me), 1.0];
///     let mut total = [0.0; 2];
///     world.reduce_to_all(&mine, &mut total, Op::sum())?;
///     assert_eq!(total[1], f64::from(n));
///
///     // Everybody's rank, at rank 0 only.
///     let mut all = vec![0u32; n as usize];
///     world.gather(&[me], (me == 0).then_some(&mut all[..]), 0)?;
///
///     // A non-commutative closure, with both synchronizations.
///     let first_nonzero = Op::custom(|a: &u32, b: &u32| if *a != 0 { *a } else { *b });
///     let mut x = [me % 2];
///     world
///         .with_sync(SyncMode::all())
///         .reduce_to_all_in_place(&mut x, first_nonzero)?;
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct Comm {
    coll: Coll,
    team: Team,
    images: bool,
    sync: SyncMode,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("team", &self.team)
            .field("images", &self.images)
            .field("sync", &self.sync)
            .finish()
    }
}

impl Coll {
    /// The typed view of `team` with its ranks as participants; one thread per rank calls
    /// (see [`Comm`]). Sync mode [`SyncMode::my`].
    pub fn team(&self, team: &Team) -> Comm {
        Comm {
            coll: self.clone(),
            team: team.clone(),
            images: false,
            sync: SyncMode::default(),
        }
    }

    /// The typed view of `team` with its images as participants; every image thread of
    /// every member calls, with its own `Coll` (see [`Comm`]). Sync mode [`SyncMode::my`].
    pub fn team_images(&self, team: &Team) -> Comm {
        Comm {
            coll: self.clone(),
            team: team.clone(),
            images: true,
            sync: SyncMode::default(),
        }
    }
}

/// A lent buffer: (address, bytes).
type Lent = (usize, usize);

/// A typed call's source.
enum Src {
    /// None here (the participant has no source for this call).
    None,
    /// The participant's destination.
    InPlace,
    /// Memory of the caller's.
    Mem(Lent),
}

/// A typed call's reduction.
struct RedArgs {
    es: usize,
    count: usize,
    f: Resolved,
}

/// A typed collective started on this rank: what its wait needs to finish it and to let go
/// of the caller's buffers. Dropping one that did not end (a panic between its start and
/// its end) detaches it as [`Started::end`] does, before the borrow of its buffers ends.
pub(crate) struct Started {
    coll: Coll,
    what: &'static str,
    handle: CollHandle,
    group: Key,
    lent: Vec<Lent>,
    panic: Option<PanicSlot>,
    /// The collective was detached from `lent`.
    ended: bool,
}

impl Started {
    /// Wait, then let go of the buffers.
    pub(crate) fn wait(self) -> Result<()> {
        let r = self.coll.wait_sync(self.handle);
        self.end(r)
    }

    /// One poll and progress pass: whether the collective completed.
    pub(crate) fn test(&self) -> Result<bool> {
        self.coll.try_sync(self.handle)
    }

    /// Let go of the buffers after the sync's outcome `r`: a collective still in flight (a
    /// failed wait) is detached from them, a complete one fenced off; then `r`, or the
    /// closure's panic.
    pub(crate) fn end(mut self, r: Result<()>) -> Result<()> {
        self.detach();
        r?;
        if let Some(p) = self.panic.as_ref().and_then(|s| s.get()) {
            return Err(usage(
                self.what,
                format!(
                    "the reduction closure panicked on rank {}: {p}; the results of this call \
                     are not valid",
                    self.coll.sh.rank
                ),
            ));
        }
        Ok(())
    }
}

impl Started {
    /// Detach the collective from the lent buffers (once) and retire its handle.
    fn detach(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let h = (!self.handle.is_invalid()).then_some(self.handle.0);
        // SAFETY: `lent` are the buffers this call borrowed, and the borrow lasts until this
        // returns: a blocking call holds it for the call and a request for its scope, and
        // both end a `Started` (by `end`, or by dropping it, also while unwinding) before
        // their borrow ends.
        unsafe { self.coll.sh.detach(self.group, h, &self.lent) };
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.detach();
    }
}

fn lend<T: Plain>(v: &[T]) -> Lent {
    (v.as_ptr() as usize, std::mem::size_of_val(v))
}

impl Comm {
    /// This participant's number: its team rank, or its team image in an images view.
    pub fn rank(&self) -> u32 {
        if self.space_images() {
            self.coll.team_image(self.team.geo())
        } else {
            self.team.rank()
        }
    }

    /// The number of participants: the team's ranks, or its images in an images view.
    pub fn size(&self) -> u32 {
        if self.space_images() {
            self.team.images()
        } else {
            self.team.size()
        }
    }

    /// The team.
    pub fn team(&self) -> &Team {
        &self.team
    }

    /// The rank's collectives handle.
    pub fn coll(&self) -> &Coll {
        &self.coll
    }

    /// Whether the participants are images ([`Coll::team_images`]).
    pub fn is_images(&self) -> bool {
        self.images
    }

    /// The sync mode of this view's calls.
    pub fn sync_mode(&self) -> SyncMode {
        self.sync
    }

    /// This view with sync mode `sync` (per call: `comm.with_sync(SyncMode::all()).broadcast(..)`).
    pub fn with_sync(&self, sync: SyncMode) -> Comm {
        Comm {
            sync,
            ..self.clone()
        }
    }

    /// Image participants in the raw sense: an images view in a job where some rank hosts
    /// several images (with one image per rank an images view is a rank view).
    fn space_images(&self) -> bool {
        self.images && self.coll.multi_image()
    }

    fn flags(&self) -> u32 {
        let addressing = if self.space_images() {
            LOCAL | ALL_THREADS
        } else {
            SINGLE
        };
        self.sync.flags() | addressing
    }

    /// The raw root (an image of the team) of participant `root`.
    fn root(&self, what: &'static str, root: u32) -> Result<u32> {
        let n = self.size();
        if root >= n {
            return Err(usage(
                what,
                format!(
                    "root {root} is not a participant (the call has {n}: {})",
                    if self.space_images() {
                        "the team's images"
                    } else {
                        "the team's ranks"
                    }
                ),
            ));
        }
        Ok(if self.space_images() {
            root
        } else {
            self.team.geo().img_first[root as usize]
        })
    }

    fn is_root(&self, root: u32) -> bool {
        self.rank() == root
    }

    /// Start a typed call: `bytes` per block for data movement, or `red` for a reduction.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        what: &'static str,
        kind: Kind,
        root: Option<u32>,
        bytes: usize,
        src: Src,
        dst: Option<Lent>,
        red: Option<RedArgs>,
        blocking: bool,
    ) -> Result<Started> {
        if let Some(h) = self.coll.endpoint().current_handler() {
            return Err(Error::InHandler {
                op: what,
                handler: h,
            });
        }
        let root = root.map(|r| self.root(what, r)).transpose()?;
        let mut lent = Vec::with_capacity(2);
        let s = match src {
            Src::None | Src::InPlace => Addr::InPlace,
            Src::Mem(m) => {
                lent.push(m);
                // SAFETY: the caller's slice, borrowed for the call (blocking) or the scope
                // (non-blocking); the collective only reads a source that is not in place.
                // `Started::end` detaches it before the borrow ends, whatever the outcome.
                unsafe { Addr::ptr(m.0 as *mut u8) }
            }
        };
        let d = match dst {
            None => Addr::InPlace,
            Some(m) => {
                lent.push(m);
                // SAFETY: the caller's exclusive borrow, held as for the source.
                unsafe { Addr::ptr(m.0 as *mut u8) }
            }
        };
        let flags = self.flags();
        let (c, panic) = match red {
            None => (
                call(what, kind, root, Counts::Uniform(bytes), one(s, d), flags),
                None,
            ),
            Some(r) => {
                let mut c = red_call(
                    what,
                    kind,
                    root,
                    one(s, d),
                    vred(r.es, r.count, r.f.func, 0),
                    flags,
                );
                c.call_fn = r.f.call_fn;
                (c, r.f.panic)
            }
        };
        let mut c = c;
        c.blocking = blocking;
        let mut entered = None;
        match self.coll.start_keyed(&self.team, c, &mut entered) {
            Ok((handle, group)) => Ok(Started {
                coll: self.coll.clone(),
                what,
                handle,
                group,
                lent,
                panic,
                ended: false,
            }),
            Err(e) => {
                if let Some((h, group)) = entered {
                    // SAFETY: as in `Started::end`: the buffers are still borrowed here.
                    unsafe { self.coll.sh.detach(group, h, &lent) };
                }
                Err(e)
            }
        }
    }

    fn nonempty<T>(what: &'static str, arg: &str, v: &[T]) -> Result<()> {
        if std::mem::size_of_val(v) == 0 {
            return Err(usage(
                what,
                format!(
                    "{arg} holds no bytes ({} elements of {} bytes); a collective moves at \
                     least one byte",
                    v.len(),
                    std::mem::size_of::<T>()
                ),
            ));
        }
        Ok(())
    }

    fn len_is(what: &'static str, arg: &str, got: usize, want: usize, why: &str) -> Result<()> {
        if got != want {
            return Err(usage(
                what,
                format!("{arg} has {got} elements; {why} makes it {want}"),
            ));
        }
        Ok(())
    }

    fn participants(&self) -> usize {
        self.size() as usize
    }

    // ----- starts (shared by the blocking and the non-blocking forms) ---------------------

    fn start_broadcast<T: Plain>(
        &self,
        buf: &mut [T],
        root: u32,
        blocking: bool,
    ) -> Result<Started> {
        const W: &str = "broadcast";
        Self::nonempty(W, "buf", buf)?;
        let m = lend(buf);
        self.launch(
            W,
            Kind::Broadcast,
            Some(root),
            m.1,
            Src::InPlace,
            Some(m),
            None,
            blocking,
        )
    }

    fn start_scatter<T: Plain>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        root: u32,
        blocking: bool,
    ) -> Result<Started> {
        const W: &str = "scatter";
        Self::nonempty(W, "recv", recv)?;
        let src = if self.is_root(root) {
            let Some(send) = send else {
                return Err(usage(
                    W,
                    "the root passes send = None; it scatters its send buffer",
                ));
            };
            Self::len_is(
                W,
                "send",
                send.len(),
                recv.len() * self.participants(),
                "recv's length times the participants",
            )?;
            Src::Mem(lend(send))
        } else {
            Src::None
        };
        let m = lend(recv);
        self.launch(
            W,
            Kind::Scatter,
            Some(root),
            m.1,
            src,
            Some(m),
            None,
            blocking,
        )
    }

    fn start_gather<T: Plain>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        root: u32,
        blocking: bool,
    ) -> Result<Started> {
        const W: &str = "gather";
        Self::nonempty(W, "send", send)?;
        let dst = if self.is_root(root) {
            let Some(recv) = recv else {
                return Err(usage(
                    W,
                    "the root passes recv = None; it receives every participant's block",
                ));
            };
            Self::len_is(
                W,
                "recv",
                recv.len(),
                send.len() * self.participants(),
                "send's length times the participants",
            )?;
            Some(lend(recv))
        } else {
            None
        };
        let s = lend(send);
        self.launch(
            W,
            Kind::Gather,
            Some(root),
            s.1,
            Src::Mem(s),
            dst,
            None,
            blocking,
        )
    }

    fn start_gather_all<T: Plain>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        blocking: bool,
    ) -> Result<Started> {
        const W: &str = "gather_all";
        let np = self.participants();
        let (src, block) = match send {
            Some(send) => {
                Self::nonempty(W, "send", send)?;
                Self::len_is(
                    W,
                    "recv",
                    recv.len(),
                    send.len() * np,
                    "send's length times the participants",
                )?;
                (Src::Mem(lend(send)), std::mem::size_of_val(send))
            }
            None => {
                Self::nonempty(W, "buf", recv)?;
                if recv.len() % np != 0 {
                    return Err(usage(
                        W,
                        format!(
                            "buf has {} elements, not a multiple of the {np} participants",
                            recv.len()
                        ),
                    ));
                }
                (Src::InPlace, std::mem::size_of_val(recv) / np)
            }
        };
        let d = lend(recv);
        self.launch(
            W,
            Kind::GatherAll,
            None,
            block,
            src,
            Some(d),
            None,
            blocking,
        )
    }

    fn start_exchange<T: Plain>(
        &self,
        send: &[T],
        recv: &mut [T],
        blocking: bool,
    ) -> Result<Started> {
        const W: &str = "exchange";
        let np = self.participants();
        Self::nonempty(W, "send", send)?;
        if send.len() % np != 0 {
            return Err(usage(
                W,
                format!(
                    "send has {} elements, not a multiple of the {np} participants (one block \
                     for each)",
                    send.len()
                ),
            ));
        }
        Self::len_is(W, "recv", recv.len(), send.len(), "send's length")?;
        let s = lend(send);
        let d = lend(recv);
        self.launch(
            W,
            Kind::Exchange,
            None,
            s.1 / np,
            Src::Mem(s),
            Some(d),
            None,
            blocking,
        )
    }

    /// A vector reduction: `send` (or the destination, in place) combined into `recv`.
    #[allow(clippy::too_many_arguments)]
    fn start_reduction<T: Plain>(
        &self,
        what: &'static str,
        kind: Kind,
        root: Option<u32>,
        send: Option<&[T]>,
        recv: Option<&mut [T]>,
        count: usize,
        op: Op<T>,
        blocking: bool,
    ) -> Result<Started> {
        if count == 0 || std::mem::size_of::<T>() == 0 {
            return Err(usage(
                what,
                format!(
                    "the buffers hold no bytes ({count} elements of {} bytes); a reduction \
                     combines at least one element",
                    std::mem::size_of::<T>()
                ),
            ));
        }
        if let (Some(s), Some(r)) = (&send, &recv) {
            Self::len_is(what, "recv", r.len(), s.len(), "send's length")?;
        }
        let f = op.resolve(what)?;
        let src = match send {
            Some(s) => Src::Mem(lend(s)),
            None => Src::InPlace,
        };
        let dst = recv.map(|r| lend(r));
        let red = RedArgs {
            es: std::mem::size_of::<T>(),
            count,
            f,
        };
        self.launch(what, kind, root, 0, src, dst, Some(red), blocking)
    }

    fn start_reduce<T: Plain>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: Op<T>,
        root: u32,
        blocking: bool,
    ) -> Result<Started> {
        const W: &str = "reduce";
        let recv = if self.is_root(root) {
            let Some(r) = recv else {
                return Err(usage(
                    W,
                    "the root passes recv = None; it receives the reduction",
                ));
            };
            Some(r)
        } else {
            None
        };
        let n = send.len();
        self.start_reduction(
            W,
            Kind::ReduceElems,
            Some(root),
            Some(send),
            recv,
            n,
            op,
            blocking,
        )
    }

    fn start_reduce_in_place<T: Plain>(
        &self,
        buf: &mut [T],
        op: Op<T>,
        root: u32,
        blocking: bool,
    ) -> Result<Started> {
        const W: &str = "reduce_in_place";
        let n = buf.len();
        if self.is_root(root) {
            self.start_reduction(
                W,
                Kind::ReduceElems,
                Some(root),
                None,
                Some(buf),
                n,
                op,
                blocking,
            )
        } else {
            self.start_reduction(
                W,
                Kind::ReduceElems,
                Some(root),
                Some(buf),
                None,
                n,
                op,
                blocking,
            )
        }
    }

    // ----- blocking ------------------------------------------------------------------------

    /// Broadcast: the root's `buf` to every participant's `buf`.
    pub fn broadcast<T: Plain>(&self, buf: &mut [T], root: u32) -> Result<()> {
        self.start_broadcast(buf, root, true)?.wait()
    }

    /// Scatter: block `i` (of `recv.len()` elements) of the root's `send` to participant
    /// `i`'s `recv`. The root passes `Some(send)` of `recv.len() * size()` elements; the
    /// others' `send` is not used (pass `None`).
    pub fn scatter<T: Plain>(&self, send: Option<&[T]>, recv: &mut [T], root: u32) -> Result<()> {
        self.start_scatter(send, recv, root, true)?.wait()
    }

    /// Gather: participant `i`'s `send` to block `i` of the root's `recv`. The root passes
    /// `Some(recv)` of `send.len() * size()` elements; the others' `recv` is not used (pass
    /// `None`).
    pub fn gather<T: Plain>(&self, send: &[T], recv: Option<&mut [T]>, root: u32) -> Result<()> {
        self.start_gather(send, recv, root, true)?.wait()
    }

    /// Gather to all: participant `i`'s `send` to block `i` of every participant's `recv`
    /// (`send.len() * size()` elements).
    pub fn gather_all<T: Plain>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.start_gather_all(Some(send), recv, true)?.wait()
    }

    /// Gather to all in place: participant `i`'s block `i` of `buf` (`buf.len() / size()`
    /// elements) to block `i` of every participant's `buf`.
    pub fn gather_all_in_place<T: Plain>(&self, buf: &mut [T]) -> Result<()> {
        self.start_gather_all(None, buf, true)?.wait()
    }

    /// All-to-all: block `j` of participant `i`'s `send` to block `i` of participant `j`'s
    /// `recv` (blocks of `send.len() / size()` elements; `recv` as long as `send`).
    pub fn exchange<T: Plain>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.start_exchange(send, recv, true)?.wait()
    }

    /// Elementwise reduction to the root: `recv[j] = send_0[j] ∘ send_1[j] ∘ …` in
    /// participant order. The root passes `Some(recv)` as long as `send`; the others' `recv`
    /// is not used (pass `None`).
    pub fn reduce<T: Plain>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: impl Into<Op<T>>,
        root: u32,
    ) -> Result<()> {
        self.start_reduce(send, recv, op.into(), root, true)?.wait()
    }

    /// [`Comm::reduce`] in place: the root's `buf` is its operand and receives the result;
    /// the others' `buf` is their operand (left unchanged).
    pub fn reduce_in_place<T: Plain>(
        &self,
        buf: &mut [T],
        op: impl Into<Op<T>>,
        root: u32,
    ) -> Result<()> {
        self.start_reduce_in_place(buf, op.into(), root, true)?
            .wait()
    }

    /// Elementwise reduction to every participant: `recv[j] = send_0[j] ∘ send_1[j] ∘ …`
    /// (every participant gets the same bits).
    pub fn reduce_to_all<T: Plain>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<Op<T>>,
    ) -> Result<()> {
        let n = send.len();
        self.start_reduction(
            "reduce_to_all",
            Kind::ReduceElemsAll,
            None,
            Some(send),
            Some(recv),
            n,
            op.into(),
            true,
        )?
        .wait()
    }

    /// [`Comm::reduce_to_all`] in place: `buf` is the operand and receives the result.
    pub fn reduce_to_all_in_place<T: Plain>(
        &self,
        buf: &mut [T],
        op: impl Into<Op<T>>,
    ) -> Result<()> {
        let n = buf.len();
        self.start_reduction(
            "reduce_to_all_in_place",
            Kind::ReduceElemsAll,
            None,
            None,
            Some(buf),
            n,
            op.into(),
            true,
        )?
        .wait()
    }

    /// Inclusive elementwise scan: participant `p`'s `recv[j] = send_0[j] ∘ … ∘ send_p[j]`.
    pub fn scan<T: Plain>(&self, send: &[T], recv: &mut [T], op: impl Into<Op<T>>) -> Result<()> {
        let n = send.len();
        self.start_reduction(
            "scan",
            Kind::ScanElems,
            None,
            Some(send),
            Some(recv),
            n,
            op.into(),
            true,
        )?
        .wait()
    }

    /// [`Comm::scan`] in place.
    pub fn scan_in_place<T: Plain>(&self, buf: &mut [T], op: impl Into<Op<T>>) -> Result<()> {
        let n = buf.len();
        self.start_reduction(
            "scan_in_place",
            Kind::ScanElems,
            None,
            None,
            Some(buf),
            n,
            op.into(),
            true,
        )?
        .wait()
    }

    /// Exclusive elementwise scan: participant `p > 0`'s `recv[j] = send_0[j] ∘ … ∘
    /// send_{p-1}[j]`; participant 0's `recv` is left unchanged.
    pub fn exclusive_scan<T: Plain>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<Op<T>>,
    ) -> Result<()> {
        let n = send.len();
        self.start_reduction(
            "exclusive_scan",
            Kind::ExclusiveScanElems,
            None,
            Some(send),
            Some(recv),
            n,
            op.into(),
            true,
        )?
        .wait()
    }

    /// [`Comm::exclusive_scan`] in place (participant 0's `buf` is left unchanged).
    pub fn exclusive_scan_in_place<T: Plain>(
        &self,
        buf: &mut [T],
        op: impl Into<Op<T>>,
    ) -> Result<()> {
        let n = buf.len();
        self.start_reduction(
            "exclusive_scan_in_place",
            Kind::ExclusiveScanElems,
            None,
            None,
            Some(buf),
            n,
            op.into(),
            true,
        )?
        .wait()
    }

    // ----- non-blocking ----------------------------------------------------------------------

    /// [`Comm::broadcast`], started in `scope`.
    pub fn broadcast_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a mut [T],
        root: u32,
    ) -> Result<Request<'a, 's>> {
        Ok(scope.add(self.start_broadcast(buf, root, false)?))
    }

    /// [`Comm::scatter`], started in `scope`.
    pub fn scatter_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        root: u32,
    ) -> Result<Request<'a, 's>> {
        Ok(scope.add(self.start_scatter(send, recv, root, false)?))
    }

    /// [`Comm::gather`], started in `scope`.
    pub fn gather_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        send: &'a [T],
        recv: Option<&'a mut [T]>,
        root: u32,
    ) -> Result<Request<'a, 's>> {
        Ok(scope.add(self.start_gather(send, recv, root, false)?))
    }

    /// [`Comm::gather_all`], started in `scope`.
    pub fn gather_all_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<Request<'a, 's>> {
        Ok(scope.add(self.start_gather_all(Some(send), recv, false)?))
    }

    /// [`Comm::exchange`], started in `scope`.
    pub fn exchange_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<Request<'a, 's>> {
        Ok(scope.add(self.start_exchange(send, recv, false)?))
    }

    /// [`Comm::reduce`], started in `scope`.
    pub fn reduce_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        send: &'a [T],
        recv: Option<&'a mut [T]>,
        op: impl Into<Op<T>>,
        root: u32,
    ) -> Result<Request<'a, 's>> {
        Ok(scope.add(self.start_reduce(send, recv, op.into(), root, false)?))
    }

    /// [`Comm::reduce_in_place`], started in `scope`.
    pub fn reduce_in_place_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a mut [T],
        op: impl Into<Op<T>>,
        root: u32,
    ) -> Result<Request<'a, 's>> {
        Ok(scope.add(self.start_reduce_in_place(buf, op.into(), root, false)?))
    }

    /// [`Comm::reduce_to_all`], started in `scope`.
    pub fn reduce_to_all_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        op: impl Into<Op<T>>,
    ) -> Result<Request<'a, 's>> {
        let n = send.len();
        let st = self.start_reduction(
            "reduce_to_all",
            Kind::ReduceElemsAll,
            None,
            Some(send),
            Some(recv),
            n,
            op.into(),
            false,
        )?;
        Ok(scope.add(st))
    }

    /// [`Comm::scan`], started in `scope`.
    pub fn scan_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        op: impl Into<Op<T>>,
    ) -> Result<Request<'a, 's>> {
        let n = send.len();
        let st = self.start_reduction(
            "scan",
            Kind::ScanElems,
            None,
            Some(send),
            Some(recv),
            n,
            op.into(),
            false,
        )?;
        Ok(scope.add(st))
    }

    /// [`Comm::exclusive_scan`], started in `scope`.
    pub fn exclusive_scan_nb<'a, 's, T: Plain>(
        &self,
        scope: &'s Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        op: impl Into<Op<T>>,
    ) -> Result<Request<'a, 's>> {
        let n = send.len();
        let st = self.start_reduction(
            "exclusive_scan",
            Kind::ExclusiveScanElems,
            None,
            Some(send),
            Some(recv),
            n,
            op.into(),
            false,
        )?;
        Ok(scope.add(st))
    }

    // ----- teams -----------------------------------------------------------------------------

    /// Team creation and destruction are calls of one thread per rank.
    fn rank_view(&self, what: &'static str) -> Result<()> {
        if self.images {
            return Err(usage(
                what,
                "team creation and destruction are made by one thread per rank; call them on \
                 the ranks view (Coll::team)",
            ));
        }
        Ok(())
    }

    fn child(&self, t: Team) -> Comm {
        Comm {
            coll: self.coll.clone(),
            team: t,
            images: self.images,
            sync: self.sync,
        }
    }

    /// Wait until every participant called `barrier` ([`Coll::barrier`], or in an images
    /// view [`Coll::barrier_images`]).
    pub fn barrier(&self) -> Result<()> {
        if self.images {
            self.coll.barrier_images(&self.team)
        } else {
            self.coll.barrier(&self.team)
        }
    }

    /// [`Coll::split`] of this view's team, as a view with the same settings.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>> {
        self.rank_view("team split")?;
        Ok(self
            .coll
            .split(&self.team, color, key)?
            .map(|t| self.child(t)))
    }

    /// [`Coll::split_strided`] of this view's team.
    pub fn split_strided(&self, start: i64, stride: i64, size: i64) -> Result<Option<Comm>> {
        self.rank_view("team split_strided")?;
        Ok(self
            .coll
            .split_strided(&self.team, start, stride, size)?
            .map(|t| self.child(t)))
    }

    /// [`Coll::split_2d`] of this view's team: (row, column).
    pub fn split_2d(&self, xrange: u32) -> Result<(Comm, Comm)> {
        self.rank_view("team split_2d")?;
        let (r, c) = self.coll.split_2d(&self.team, xrange)?;
        Ok((self.child(r), self.child(c)))
    }

    /// [`Coll::create`] from this view's team.
    pub fn create(&self, members: &[u32]) -> Result<Option<Comm>> {
        self.rank_view("team create")?;
        Ok(self
            .coll
            .create(&self.team, members)?
            .map(|t| self.child(t)))
    }

    /// [`Coll::destroy`] this view's team.
    pub fn destroy(self) -> Result<()> {
        self.rank_view("team destroy")?;
        self.coll.destroy(&self.team)
    }
}
