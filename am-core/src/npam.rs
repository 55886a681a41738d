//! Negotiated-payload Medium and Long requests (spec/core.md §3a), in the manner of GASNet-EX's
//! `gex_AM_PrepareRequestMedium` / `gex_AM_CommitRequestMedium`: the client asks for a buffer
//! of up to `max_len` bytes, builds its payload in it, then commits the message with the final
//! length and arguments, or cancels it by dropping the buffer.
//!
//! The buffer comes from a per-thread pool of the library (no allocation once a thread has
//! prepared as many messages at once as it ever will), and the commit hands it to the conduit
//! like `request_medium`/`request_long`: one copy into the conduit, where building the payload
//! in a buffer of the client's own and sending it takes that copy too.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use crate::conduit::Category;
use crate::endpoint::Endpoint;
use crate::{Error, Rank, Result};

thread_local! {
    /// Buffers of committed or cancelled messages, for the next prepare on this thread.
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
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

/// A prepared Medium or Long request: a buffer of the negotiated size to build the payload in
/// (`Deref<Target = [u8]>`), sent by [`commit`](Prepared::commit); dropping it cancels the
/// message (nothing is sent).
#[derive(Debug)]
#[must_use = "a prepared message is sent only by commit; dropping it cancels it"]
pub struct Prepared<'ep> {
    ep: &'ep Endpoint,
    dest: Rank,
    handler: u8,
    category: Category,
    /// Long only: where the payload lands in `dest`'s segment.
    dest_offset: u64,
    buf: Option<Vec<u8>>,
}

impl Deref for Prepared<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or_default()
    }
}

impl DerefMut for Prepared<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().unwrap_or_default()
    }
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            give_back(b);
        }
    }
}

impl Prepared<'_> {
    /// Send the message with the first `len` bytes of the buffer as its payload and `args`
    /// (at most `MAX_ARGS`); `len` may be anything up to the size negotiated. Errors as the
    /// request calls, and `Error::Usage` for a `len` beyond the buffer; the message is not
    /// sent then.
    pub fn commit(mut self, args: &[u32], len: usize) -> Result<()> {
        let buf = self.buf.take().unwrap_or_default();
        let r = if len > buf.len() {
            Err(Error::Usage {
                op: "commit",
                detail: format!(
                    "a payload of {len} bytes in a buffer prepared for at most {}",
                    buf.len()
                ),
            })
        } else {
            match self.category {
                Category::Long => self.ep.request_long(
                    self.dest,
                    self.handler,
                    args,
                    &buf[..len],
                    self.dest_offset,
                ),
                _ => self
                    .ep
                    .request_medium(self.dest, self.handler, args, &buf[..len]),
            }
        };
        give_back(buf);
        r
    }

    /// Drop the message without sending it (what dropping the value does).
    pub fn cancel(self) {}
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
        Ok(Prepared {
            ep: self,
            dest,
            handler,
            category: Category::Medium,
            dest_offset: 0,
            buf: Some(take_buffer(max_len)),
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
            buf: Some(take_buffer(max_len)),
        })
    }
}
