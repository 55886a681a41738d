//! Reassembly: in-order fragments from one peer to whole messages, one message in progress
//! per peer ([`Partial`]). A Long payload goes to its place through the [`LongSink`] fragment
//! by fragment; anything else is gathered in a buffer. A complete message joins the delivery
//! queue, unless the caller takes it straight off the wire.

use amnet_core::{Category, Rank};

use crate::wire::{AmHeader, Fragment};

use super::{ix, len_u64, take_buf, to_usize, Delivery, Proto, RxError, Take};

/// The most bytes reserved up front for a message in reassembly; beyond, the buffer grows as
/// fragments arrive, so a peer's claimed length alone cannot make us allocate.
const PREALLOC_MAX: u64 = 1 << 22;

/// The receiver's segment, as the protocol writes Long payloads into it: each fragment's
/// chunk goes to its place as it is taken in, so a Long is never reassembled in a buffer and
/// copied again. Installed with [`Proto::set_long_sink`].
pub trait LongSink: Send {
    /// Whether `len` bytes at `offset` lie inside the segment. Asked once per Long message,
    /// at its first fragment; a message that does not fit is reassembled in a buffer and
    /// delivered as usual (the caller then reports it).
    fn fits(&self, offset: u64, len: u64) -> bool;
    /// Copies `chunk` to `offset`. Only called for ranges inside one that [`LongSink::fits`]
    /// accepted.
    fn write(&mut self, offset: u64, chunk: &[u8]);
}

/// A message in reassembly.
#[derive(Debug)]
pub(super) struct Partial {
    msg_id: u64,
    pub(super) next_index: u32,
    pub(super) count: u32,
    total: u64,
    am: AmHeader,
    /// Bytes taken in so far.
    got: u64,
    /// The payload goes through the [`LongSink`], not into `buf`.
    placed: bool,
    buf: Vec<u8>,
}

/// Writes `chunk` at `offset` through the Long sink, when one is installed (a free function
/// so that it borrows only the sink while a peer's reassembly state is borrowed too).
fn write_placed(sink: &mut Option<Box<dyn LongSink>>, offset: u64, chunk: &[u8]) {
    if let Some(sink) = sink.as_mut() {
        sink.write(offset, chunk);
    }
}

impl Proto {
    /// Takes one in-order fragment from `src` into reassembly; a message it completes by
    /// itself is offered to `take` first (see [`Proto::on_datagram_direct`]).
    pub(super) fn accept(
        &mut self,
        src: Rank,
        f: &Fragment<'_>,
        take: Option<Take<'_>>,
    ) -> Result<(), RxError> {
        let err = |what| Err(RxError::Protocol { src, what });
        let peer = &mut self.peers[ix(src)];
        if f.index == 0 {
            let Some(am) = &f.am else {
                return err("first fragment without an AM header");
            };
            let mut result = Ok(());
            if peer.partial.take().is_some() {
                result = err("a message began before the previous one was complete");
            }
            if f.msg_id != peer.rcv_msg_next {
                result = err("message id out of sequence");
            }
            peer.rcv_msg_next = f.msg_id.wrapping_add(1);
            if f.total_len > self.cfg.max_message {
                return err("message above max_message");
            }
            if f.count == 1 {
                if let Some(take) = take {
                    if !self.has_ready() && take(src, am, f.chunk) {
                        self.counters.messages_received += 1;
                        self.taken = true;
                        return result;
                    }
                }
                if self.place(am, f.total_len) {
                    write_placed(&mut self.long_sink, am.long_offset, f.chunk);
                    self.push_ready(src, *am, Vec::new(), Some(f.total_len), 1);
                } else {
                    let mut buf = take_buf(&mut self.pool);
                    buf.extend_from_slice(f.chunk);
                    self.push_ready(src, *am, buf, None, 1);
                }
            } else {
                let placed = self.place(am, f.total_len);
                let buf = if placed {
                    write_placed(&mut self.long_sink, am.long_offset, f.chunk);
                    Vec::new()
                } else {
                    let mut buf = Vec::with_capacity(to_usize(f.total_len.min(PREALLOC_MAX)));
                    buf.extend_from_slice(f.chunk);
                    buf
                };
                self.peers[ix(src)].partial = Some(Box::new(Partial {
                    msg_id: f.msg_id,
                    next_index: 1,
                    count: f.count,
                    total: f.total_len,
                    am: *am,
                    got: len_u64(f.chunk.len()),
                    placed,
                    buf,
                }));
            }
            return result;
        }
        let Some(part) = peer.partial.as_mut() else {
            return err("fragment of no message in progress");
        };
        if (part.msg_id, part.next_index, part.count, part.total)
            != (f.msg_id, f.index, f.count, f.total_len)
        {
            peer.partial = None;
            return err("fragment does not continue the message in progress");
        }
        let got = part.got + len_u64(f.chunk.len());
        if got > part.total {
            peer.partial = None;
            return err("fragments longer than the message");
        }
        if part.placed {
            write_placed(&mut self.long_sink, part.am.long_offset + part.got, f.chunk);
        } else {
            part.buf.extend_from_slice(f.chunk);
        }
        part.got = got;
        part.next_index += 1;
        if part.next_index < part.count {
            return Ok(());
        }
        let Some(done) = peer.partial.take() else {
            return Ok(());
        };
        if done.got != done.total {
            return err("fragments shorter than the message");
        }
        let Partial {
            am,
            buf,
            count,
            placed,
            total,
            ..
        } = *done;
        self.push_ready(src, am, buf, placed.then_some(total), count);
        Ok(())
    }

    /// Whether a message with header `am` and payload length `len` goes through the
    /// [`LongSink`]: a Long, with a sink installed, whose range fits. (A Long that starts
    /// inside the range but whose end the sender misstated is caught by the length checks of
    /// reassembly, which drop the message before its last fragment: the sink never writes
    /// beyond `len`.)
    fn place(&self, am: &AmHeader, len: u64) -> bool {
        am.category == Category::Long
            && self
                .long_sink
                .as_ref()
                .is_some_and(|s| s.fits(am.long_offset, len))
    }

    /// Queues a complete message from `src` for delivery; its `dgrams` datagrams count against
    /// `src`'s receive window until it is taken.
    pub(super) fn push_ready(
        &mut self,
        src: Rank,
        am: AmHeader,
        payload: Vec<u8>,
        placed: Option<u64>,
        dgrams: u32,
    ) {
        let peer = &mut self.peers[ix(src)];
        peer.ready_dgrams = peer.ready_dgrams.saturating_add(dgrams);
        self.counters.messages_received += 1;
        let order = self.ready_order;
        self.ready_order += 1;
        self.ready[usize::from(am.is_reply)].push_back(Delivery {
            src,
            am,
            payload,
            placed,
            dgrams,
            order,
        });
    }
}
