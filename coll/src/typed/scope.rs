//! Non-blocking typed collectives: a [`Scope`] lends buffers to the requests started in it,
//! and does not end before every one of them let go.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;

use amnet_core::Result;

use super::Started;

/// The scope of non-blocking typed collectives, made by [`scope`]: every buffer a request
/// started in it borrows stays borrowed until the scope ends, and the scope does not end
/// before every request has let go of its buffers. Not `Send`: its requests are synced by
/// the thread that started them.
pub struct Scope<'a> {
    /// The started collectives; `None` once their request finished.
    pending: RefCell<Vec<Option<Started>>>,
    /// Invariant in `'a`: the lifetime of every buffer lent in the scope.
    _buffers: PhantomData<Cell<&'a mut ()>>,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = self.pending.borrow().iter().filter(|p| p.is_some()).count();
        f.debug_struct("Scope").field("in_flight", &live).finish()
    }
}

/// Run `f` with a [`Scope`] for non-blocking typed collectives (as rsmpi's
/// `request::scope`), then finish every request `f` left unfinished (waiting for it), and
/// return `f`'s result, or else the first error of those waits.
///
/// A buffer lent to a request (`broadcast_nb(s, &mut buf, ..)`) is borrowed for the whole
/// scope: it cannot be read, written or dropped until `scope` returns, by which time no
/// collective can touch it. If `f` panics, the requests still in flight are waited for
/// before the panic goes on. When a wait fails (a hang reported by the watchdog, a failed
/// peer), the collective is detached from the buffers first (it goes on in library memory;
/// what arrives later for it is dropped), so returning never leaves a buffer in use.
///
/// ```no_run
/// use amnet::coll::{scope, Coll, Op};
///
/// fn overlap(coll: &Coll) -> amnet::Result<()> {
///     let comm = coll.team(coll.world());
///     let mut a = [0u64; 4];
///     let mut b = [0u64; 4];
///     let mine = [u64::from(comm.rank()); 4];
///     scope(|s| {
///         let r1 = comm.broadcast_nb(s, &mut a, 0)?;
///         let r2 = comm.reduce_to_all_nb(s, &mine, &mut b, Op::sum())?;
///         // ... compute here, then finish both (or let the scope wait for them).
///         r1.wait()?;
///         r2.wait()
///     })?;
///     assert_eq!(b[0], (0..u64::from(comm.size())).sum::<u64>());
///     Ok(())
/// }
/// ```
///
/// A buffer cannot be used while a request may write it:
///
/// ```compile_fail,E0506
/// # fn f(comm: &amnet::coll::Comm) -> amnet::Result<()> {
/// let mut buf = [0u32; 8];
/// amnet::coll::scope(|s| {
///     let r = comm.broadcast_nb(s, &mut buf, 0)?;
///     buf[0] = 1; // error: `buf` is borrowed by the request
///     r.wait()
/// })
/// # }
/// ```
///
/// nor dropped:
///
/// ```compile_fail,E0505
/// # fn f(comm: &amnet::coll::Comm) -> amnet::Result<()> {
/// let mut buf = vec![0u32; 8];
/// amnet::coll::scope(|s| {
///     let r = comm.broadcast_nb(s, &mut buf, 0)?;
///     drop(buf); // error: cannot move out of `buf` while it is borrowed
///     r.wait()
/// })
/// # }
/// ```
///
/// and a buffer that ends before the scope cannot be lent at all:
///
/// ```compile_fail,E0597
/// # fn f(comm: &amnet::coll::Comm) -> amnet::Result<()> {
/// amnet::coll::scope(|s| {
///     let mut buf = [0u32; 8];
///     let r = comm.broadcast_nb(s, &mut buf, 0)?; // error: `buf` does not live long enough
///     r.wait()
/// })
/// # }
/// ```
///
/// A request cannot leave its scope either (so none outlives the waits at its end):
///
/// ```compile_fail
/// # fn f(comm: &amnet::coll::Comm) -> amnet::Result<()> {
/// let mut buf = [0u32; 8];
/// let escaped = amnet::coll::scope(|s| comm.broadcast_nb(s, &mut buf, 0))?; // error
/// escaped.wait()
/// # }
/// ```
pub fn scope<'a, R>(f: impl for<'s> FnOnce(&'s Scope<'a>) -> Result<R>) -> Result<R> {
    let s = Scope {
        pending: RefCell::new(Vec::new()),
        _buffers: PhantomData,
    };
    let r = f(&s);
    let end = s.finish_all();
    match (r, end) {
        (Ok(v), Ok(())) => Ok(v),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    }
}

impl<'a> Scope<'a> {
    /// Keep `st` until its request finishes or the scope ends.
    pub(crate) fn add<'s>(&'s self, st: Started) -> Request<'a, 's> {
        let mut p = self.pending.borrow_mut();
        p.push(Some(st));
        Request {
            scope: self,
            id: p.len() - 1,
        }
    }

    fn take(&self, id: usize) -> Option<Started> {
        self.pending.borrow_mut().get_mut(id).and_then(Option::take)
    }

    /// Wait for every collective still pending; the first error.
    fn finish_all(&self) -> Result<()> {
        let mut first = Ok(());
        loop {
            // Take one at a time: no borrow is held while waiting.
            let next = self.pending.borrow_mut().iter_mut().find_map(Option::take);
            let Some(st) = next else {
                return first;
            };
            if let Err(e) = st.wait() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
    }
}

impl Drop for Scope<'_> {
    /// On the way out of a panic in the scope's closure: the collectives still pending are
    /// waited for (and detached if a wait fails) before the buffers they borrow go away.
    fn drop(&mut self) {
        let _ = self.finish_all();
    }
}

/// A non-blocking typed collective started in a [`Scope`]: it borrows its buffers for the
/// scope's lifetime `'a`. Finish it with [`Request::wait`] or [`Request::test`]; one that is
/// dropped unfinished is waited for when the scope ends. Not `Copy`, not `Send`.
#[must_use = "an unfinished request is waited for when its scope ends; wait for it or test it"]
pub struct Request<'a, 's> {
    scope: &'s Scope<'a>,
    id: usize,
}

impl std::fmt::Debug for Request<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("id", &self.id).finish()
    }
}

impl Request<'_, '_> {
    /// Wait until the collective completed on this rank to the extent of its OUT mode; its
    /// error if it failed. When the wait itself fails (`Error::Hang` from the watchdog, a
    /// failed peer), the collective is first detached from the buffers: it goes on in
    /// library memory, and what arrives later for it is dropped.
    pub fn wait(self) -> Result<()> {
        match self.scope.take(self.id) {
            Some(st) => st.wait(),
            None => Ok(()),
        }
    }

    /// One poll and progress pass: `Ok(None)` when the collective completed (the request is
    /// used up), `Ok(Some(self))` while it is in flight, its error when it failed (after
    /// detaching it from the buffers, as [`Request::wait`] does).
    pub fn test(self) -> Result<Option<Self>> {
        let Some(st) = self.scope.take(self.id) else {
            return Ok(None);
        };
        match st.test() {
            Ok(false) => {
                self.scope.pending.borrow_mut()[self.id] = Some(st);
                Ok(Some(self))
            }
            Ok(true) => st.end(Ok(())).map(|()| None),
            Err(e) => st.end(Err(e)).map(|()| None),
        }
    }
}
