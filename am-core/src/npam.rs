//! Negotiated-payload Medium and Long requests (spec/core.md §3a), in the manner of GASNet-EX's
//! `gex_AM_PrepareRequestMedium` / `gex_AM_CommitRequestMedium`: the client asks for a buffer
//! of up to `max_len` bytes, builds its payload in it, then commits the message with the final
//! length and arguments, or cancels it by dropping the buffer.
//!
//! A Medium whose conduit can build messages in place (smp: a slot of the ring to the
//! destination, [`Conduit::prepare_medium`](crate::Conduit::prepare_medium)) gets that room
//! itself: the commit writes the header and publishes, with no copy. Otherwise the buffer
//! comes from a per-thread pool of the library (no allocation once a thread has prepared as
//! many messages at once as it ever will), and the commit hands it to the conduit like
//! `request_medium`/`request_long`: one copy into the conduit, where building the payload in
//! a buffer of the client's own and sending it takes that copy too.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use crate::conduit::{Category, PreparedSlot};
use crate::endpoint::Endpoint;
use crate::{Error, Rank, Result};

thread_local! {
    /// Buffers of committed or cancelled messages, for the next prepare on this thread.
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Messages this thread prepared and has not committed or cancelled yet.
    static PREPARED_HELD: Cell<u32> = const { Cell::new(0) };
}

/// True while this thread holds a prepared message: it may not wait (spec/core.md §3a),
/// since what it waits for may be queued behind that message.
pub(crate) fn prepared_held() -> bool {
    PREPARED_HELD.with(Cell::get) > 0
}

/// `Error::Usage` for a wait by a thread that holds a prepared message.
pub(crate) fn check_may_wait(op: &'static str) -> Result<()> {
    if prepared_held() {
        return Err(Error::Usage {
            op,
            detail: "this thread holds a prepared message (prepare_request_medium or \
                     prepare_request_long) that it has not committed or cancelled: what the \
                     call would wait for may be queued behind it; commit or cancel it first"
                .into(),
        });
    }
    Ok(())
}

fn held(delta: i32) {
    PREPARED_HELD.with(|c| c.set(c.get().saturating_add_signed(delta)));
}

/// Buffers the pool keeps per thread.
const POOL_MAX: usize = 8;

fn take_buffer(len: usize) -> Vec<u8> {
    let mut b = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    b.clear();
    b.resize(len, 0);
    b
}

fn give_back(b: Vec<u8>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_MAX {
            p.push(b);
        }
    });
}

/// Where a prepared message's payload is built.
#[derive(Debug)]
enum Buf {
    /// A buffer of the library's pool.
    Pool(Vec<u8>),
    /// Room in the conduit's own send memory.
    Slot(PreparedSlot),
}

/// A prepared Medium or Long request: a buffer of the negotiated size to build the payload in
/// (`Deref<Target = [u8]>`; its initial contents are unspecified), sent by
/// [`commit`](Prepared::commit); dropping it cancels the message (nothing is sent). It is
/// committed or cancelled on the thread that prepared it (the type is not `Send`).
#[derive(Debug)]
#[must_use = "a prepared message is sent only by commit; dropping it cancels it"]
pub struct Prepared<'ep> {
    ep: &'ep Endpoint,
    dest: Rank,
    handler: u8,
    category: Category,
    /// Long only: where the payload lands in `dest`'s segment.
    dest_offset: u64,
    buf: Option<Buf>,
    /// Not `Send`: a slot is released on the thread that took it.
    _thread: PhantomData<*const ()>,
}

/// The bytes of a prepared message's buffer.
fn bytes(buf: &Option<Buf>) -> &[u8] {
    match buf {
        Some(Buf::Pool(b)) => b,
        // SAFETY: the slot's `len` bytes belong to its holder alone until it commits or
        // cancels (the conduit's claim), and stay mapped for the conduit's life.
        Some(Buf::Slot(s)) => unsafe { std::slice::from_raw_parts(s.buf.as_ptr(), s.len) },
        None => &[],
    }
}

/// [`bytes`], writable.
fn bytes_mut(buf: &mut Option<Buf>) -> &mut [u8] {
    match buf {
        Some(Buf::Pool(b)) => b,
        // SAFETY: as in `bytes`, borrowed mutably through the holder.
        Some(Buf::Slot(s)) => unsafe { std::slice::from_raw_parts_mut(s.buf.as_ptr(), s.len) },
        None => &mut [],
    }
}

/// `Error::Usage` for a commit of `len` bytes into a buffer of `cap`, or `TooManyArgs`.
fn check_commit(len: usize, cap: usize, nargs: usize) -> Result<()> {
    if len > cap {
        return Err(Error::Usage {
            op: "commit",
            detail: format!("a payload of {len} bytes in a buffer prepared for at most {cap}"),
        });
    }
    if nargs > crate::MAX_ARGS {
        return Err(Error::TooManyArgs {
            given: nargs,
            max: crate::MAX_ARGS,
        });
    }
    Ok(())
}

impl Deref for Prepared<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        bytes(&self.buf)
    }
}

impl DerefMut for Prepared<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        bytes_mut(&mut self.buf)
    }
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        match self.buf.take() {
            Some(Buf::Pool(b)) => {
                give_back(b);
                held(-1);
            }
            Some(Buf::Slot(s)) => {
                // SAFETY: the slot came from this endpoint's conduit for `dest` and was
                // neither committed nor cancelled (`buf` is taken once).
                unsafe { self.ep.inner.conduit.cancel_medium(self.dest, &s) };
                held(-1);
            }
            None => {}
        }
    }
}

impl Prepared<'_> {
    /// Send the message with the first `len` bytes of the buffer as its payload and `args`
    /// (at most `MAX_ARGS`); `len` may be anything up to the size negotiated. Errors as the
    /// request calls, and `Error::Usage` for a `len` beyond the buffer; the message is not
    /// sent then.
    pub fn commit(mut self, args: &[u32], len: usize) -> Result<()> {
        if let Some(Buf::Slot(s)) = &self.buf {
            // Refused: the drop cancels the slot.
            check_commit(len, s.len, args.len())?;
            let Some(Buf::Slot(s)) = self.buf.take() else {
                return Ok(());
            };
            // SAFETY: the slot came from this endpoint's conduit for `dest` as a request,
            // and is committed once (`buf` taken); `len` and `args` were checked above, the
            // handler at prepare.
            unsafe {
                self.ep
                    .inner
                    .conduit
                    .commit_medium(self.dest, &s, false, self.handler, args, len);
            }
            held(-1);
            self.ep.count_prepared_sent(false, len);
            return Ok(());
        }
        let buf = match self.buf.take() {
            Some(Buf::Pool(b)) => b,
            _ => Vec::new(),
        };
        // Released before the send, which may wait for room.
        held(-1);
        let r = check_commit(len, buf.len(), args.len()).and_then(|()| match self.category {
            Category::Long => {
                self.ep
                    .request_long(self.dest, self.handler, args, &buf[..len], self.dest_offset)
            }
            _ => self
                .ep
                .request_medium(self.dest, self.handler, args, &buf[..len]),
        });
        give_back(buf);
        r
    }

    /// Drop the message without sending it (what dropping the value does).
    pub fn cancel(self) {}
}

/// A prepared Medium reply (GASNet-EX's `gex_AM_PrepareReplyMedium`), from
/// [`Token::prepare_reply_medium`](crate::Token::prepare_reply_medium): a buffer of the
/// negotiated size to build the payload in (`Deref<Target = [u8]>`; initial contents
/// unspecified), sent by [`commit`](PreparedReply::commit), which counts as the handler's one
/// reply; dropping it sends nothing, and the handler may still reply. On smp the reply is
/// built in place in a slot of the reply ring to the requester (no copy at commit).
#[must_use = "a prepared reply is sent only by commit; dropping it cancels it"]
pub struct PreparedReply<'t, 'a> {
    tok: &'t mut crate::Token<'a>,
    handler: u8,
    buf: Option<Buf>,
    /// Not `Send`: a slot is released on the thread that took it.
    _thread: PhantomData<*const ()>,
}

impl std::fmt::Debug for PreparedReply<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedReply")
            .field("to", &self.tok.src)
            .field("handler", &self.handler)
            .field("len", &bytes(&self.buf).len())
            .finish()
    }
}

impl Deref for PreparedReply<'_, '_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        bytes(&self.buf)
    }
}

impl DerefMut for PreparedReply<'_, '_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        bytes_mut(&mut self.buf)
    }
}

impl Drop for PreparedReply<'_, '_> {
    fn drop(&mut self) {
        match self.buf.take() {
            Some(Buf::Pool(b)) => give_back(b),
            Some(Buf::Slot(s)) => {
                // SAFETY: the slot came from this endpoint's conduit as a reply to the
                // requester and was neither committed nor cancelled (`buf` is taken once).
                unsafe { self.tok.ep.inner.conduit.cancel_medium(self.tok.src, &s) };
            }
            None => {}
        }
    }
}

impl PreparedReply<'_, '_> {
    /// Send the reply with the first `len` bytes of the buffer and `args`; errors as
    /// `reply_medium`, and `Error::Usage` for a `len` beyond the buffer (nothing is sent
    /// then, and the handler may still reply).
    pub fn commit(mut self, args: &[u32], len: usize) -> Result<()> {
        if let Some(Buf::Slot(s)) = &self.buf {
            check_commit(len, s.len, args.len())?;
            let Some(Buf::Slot(s)) = self.buf.take() else {
                return Ok(());
            };
            let src = self.tok.src;
            // SAFETY: the slot came from this endpoint's conduit as a reply to `src`, and is
            // committed once (`buf` taken); `len` and `args` were checked above, the handler
            // at prepare.
            unsafe {
                self.tok
                    .ep
                    .inner
                    .conduit
                    .commit_medium(src, &s, true, self.handler, args, len);
            }
            self.tok.replied = true;
            self.tok.ep.count_prepared_sent(true, len);
            return Ok(());
        }
        let buf = match self.buf.take() {
            Some(Buf::Pool(b)) => b,
            _ => Vec::new(),
        };
        let r = check_commit(len, buf.len(), args.len()).and_then(|()| {
            self.tok
                .reply(self.handler, Category::Medium, args, &buf[..len], 0, false)
        });
        give_back(buf);
        r
    }

    /// Drop the reply without sending it (what dropping the value does).
    pub fn cancel(self) {}
}

impl<'a> crate::Token<'a> {
    /// Prepare a Medium reply to the requester's `handler` with a payload of at most
    /// `max_len` bytes (at most `max_medium()`): returns the buffer to build it in, sent by
    /// [`PreparedReply::commit`]. Checks as `reply_medium`: `ReplyFromReply`, `SecondReply`,
    /// the handler index, `PayloadTooLarge`.
    pub fn prepare_reply_medium(
        &mut self,
        handler: u8,
        max_len: usize,
    ) -> Result<PreparedReply<'_, 'a>> {
        self.check_may_reply()?;
        self.att.check_client_handler(handler)?;
        self.att
            .check_payload(self.src, Category::Medium, max_len, 0)?;
        let buf = match self
            .ep
            .inner
            .conduit
            .prepare_medium(self.src, true, max_len)
        {
            Some(s) => Buf::Slot(s),
            None => Buf::Pool(take_buffer(max_len)),
        };
        Ok(PreparedReply {
            tok: self,
            handler,
            buf: Some(buf),
            _thread: PhantomData,
        })
    }
}

impl Endpoint {
    /// Prepare a Medium request to `dest`'s `handler` with a payload of at most `max_len`
    /// bytes (at most `max_medium()`): returns the buffer to build it in, sent by
    /// [`Prepared::commit`]. Checks as `request_medium`.
    pub fn prepare_request_medium(
        &self,
        dest: Rank,
        handler: u8,
        max_len: usize,
    ) -> Result<Prepared<'_>> {
        let att = self.check_request("prepare_request_medium", dest, handler, &[])?;
        att.check_payload(dest, Category::Medium, max_len, 0)?;
        let buf = match self.inner.conduit.prepare_medium(dest, false, max_len) {
            Some(s) => Buf::Slot(s),
            None => Buf::Pool(take_buffer(max_len)),
        };
        held(1);
        Ok(Prepared {
            ep: self,
            dest,
            handler,
            category: Category::Medium,
            dest_offset: 0,
            buf: Some(buf),
            _thread: PhantomData,
        })
    }

    /// Prepare a Long request to `dest`'s `handler` whose payload (at most `max_len` bytes)
    /// lands at `dest_offset` in `dest`'s segment. Checks as `request_long`, for `max_len`.
    pub fn prepare_request_long(
        &self,
        dest: Rank,
        handler: u8,
        max_len: usize,
        dest_offset: u64,
    ) -> Result<Prepared<'_>> {
        let att = self.check_request("prepare_request_long", dest, handler, &[])?;
        att.check_payload(dest, Category::Long, max_len, dest_offset)?;
        Ok(Prepared {
            ep: self,
            dest,
            handler,
            category: Category::Long,
            dest_offset,
            buf: Some(Buf::Pool(take_buffer(max_len))),
            _thread: PhantomData,
        })
        .inspect(|_| held(1))
    }
}
