//! The send side: a message cut into fragments, each encoded into a queued DATA datagram
//! ([`Seg`]) on the next sequence number, its payload copied or held where it lies in the
//! sender's memory ([`Held`]); a message to this rank itself goes straight to the delivery
//! queue. The direct path hands each datagram to the caller as soon as it is encoded, when
//! nothing queued before it waits and both windows admit it. [`Datagram`] is what the
//! protocol hands over to be put on the wire.

use amnet_core::{OutMsg, Rank};

use crate::wire::{self, AmHeader, Fragment, Header, Kind, Packet, FRAG_LEN, HEADER_LEN};

use super::{ix, len_u64, take_buf, to_usize, Item, Proto, SendError};

/// One datagram to put on the wire: `bytes` followed by `tail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Destination rank.
    pub dest: Rank,
    /// The bytes (for a held payload, the headers only).
    pub bytes: &'a [u8],
    /// The payload chunk of a fragment sent from its sender's own memory
    /// ([`Proto::send_now_held`]); empty otherwise.
    pub tail: &'a [u8],
}

impl Datagram<'_> {
    /// A datagram whose bytes are all in `bytes`.
    pub fn whole(dest: Rank, bytes: &[u8]) -> Datagram<'_> {
        Datagram {
            dest,
            bytes,
            tail: &[],
        }
    }

    /// Its length on the wire.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.tail.len()
    }

    /// True when it has no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes on the wire, in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(self.bytes);
        v.extend_from_slice(self.tail);
        v
    }
}

/// What [`Proto::send_now`] did with a message it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Its datagrams went straight to the transmit callback, which took them all; the value
    /// is the time the clock read right after the last, which stamps its transmission.
    Wire(u64),
    /// Queued: [`Proto::poll_transmit`] sends it, or the part of it that the direct path could
    /// not send (or, for a message to this rank, it waits for [`Proto::pop`]).
    Queued,
}

/// One queued DATA datagram on the send side.
#[derive(Debug)]
pub(super) struct Seg {
    /// The encoded datagram; ack fields are patched at each transmission. For a held payload,
    /// its headers only: `held` is the rest.
    pub(super) buf: Vec<u8>,
    /// The payload chunk, still in the sender's memory ([`Proto::send_now_held`]).
    pub(super) held: Option<Held>,
    /// Last transmission time.
    pub(super) sent_at: u64,
    /// Per-peer transmission stamp of the last transmission (orders transmissions).
    pub(super) stamp: u64,
    /// Transmissions so far (0: not yet sent).
    pub(super) tx_count: u32,
    /// Selectively acked.
    pub(super) sacked: bool,
    /// Deemed lost: retransmit at the next opportunity.
    pub(super) lost: bool,
}

/// A payload chunk that a datagram sends from its sender's memory instead of a copy: valid
/// until [`Proto::release_held`] turns it into a copy, by the contract of
/// [`Proto::send_now_held`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub(super) ptr: std::ptr::NonNull<u8>,
    pub(super) len: usize,
}

// SAFETY: a `Held` is a read-only view of memory that the holder's caller keeps valid and
// unchanged until it is released; which thread reads it through the protocol (always under
// the conduit's lock) does not matter.
unsafe impl Send for Held {}

impl Held {
    /// The chunk, where it lies.
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: by the contract of `Proto::send_now_held`, the chunk stays valid and unchanged
        // until `Proto::release_held` replaces this view with a copy.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Seg {
    /// The payload chunk held in the sender's memory, if any.
    pub(super) fn tail(&self) -> &[u8] {
        self.held.as_ref().map_or(&[], Held::bytes)
    }
}

impl Proto {
    /// [`Proto::send`] without settling a deferred ack first (a queue that the ack would have
    /// shortened may answer back-pressure).
    pub(super) fn enqueue(&mut self, dest: Rank, msg: &OutMsg<'_>) -> Result<(), SendError> {
        self.enqueue_with(dest, msg, false, |_| {})
    }

    /// [`Proto::enqueue`], calling `pushed` after each of the message's datagrams is queued
    /// (not for a message to this rank itself), so that a caller may transmit a long message's
    /// first fragments while the later ones are still being encoded. With `hold`, each
    /// fragment's chunk is not copied: the datagram refers to it in `msg.payload` (the contract
    /// of [`Proto::send_now_held`] applies).
    pub(super) fn enqueue_with(
        &mut self,
        dest: Rank,
        msg: &OutMsg<'_>,
        hold: bool,
        mut pushed: impl FnMut(&mut Self),
    ) -> Result<(), SendError> {
        if dest >= self.nranks {
            return Err(SendError::BadRank {
                rank: dest,
                size: self.nranks,
            });
        }
        let am = AmHeader::new(
            msg.handler,
            msg.category,
            msg.is_reply,
            msg.args,
            msg.long_offset,
        )?;
        let len = msg.payload.len();
        let total = len_u64(len);
        am.check_payload(total)?;
        if total > self.cfg.max_message {
            return Err(SendError::TooLarge {
                len: total,
                max: self.cfg.max_message,
            });
        }
        if dest == self.me {
            return self.send_local(am, msg.payload);
        }
        let peer = &mut self.peers[ix(dest)];
        if peer.failed {
            return Err(SendError::PeerFailed(dest));
        }
        // mtu >= MIN_MTU > HEADER_LEN + FRAG_LEN + MAX_AM_LEN, so both are positive.
        let rest_cap = self.cfg.mtu - HEADER_LEN - FRAG_LEN;
        let first_cap = rest_cap - am.encoded_len();
        let nfrags = if len <= first_cap {
            1
        } else {
            1 + (len - first_cap).div_ceil(rest_cap)
        };
        let count = u32::try_from(nfrags).map_err(|_| SendError::TooLarge {
            len: total,
            max: self.cfg.max_message,
        })?;
        if !peer.segs.is_empty() && peer.segs.len() + nfrags > self.cfg.send_queue {
            return Err(SendError::Backpressure(dest));
        }
        let msg_id = peer.msg_next;
        peer.msg_next += 1;
        let mut off = 0;
        for index in 0..count {
            let peer = &mut self.peers[ix(dest)];
            let cap = if index == 0 { first_cap } else { rest_cap };
            let end = (off + cap).min(len);
            let chunk = &msg.payload[off..end];
            let pkt = Packet {
                header: Header {
                    kind: Kind::Data,
                    job_key: self.key,
                    src: self.me,
                    dst: dest,
                    seq: peer.snd_una + len_u64(peer.segs.len()),
                    ack: 0,
                    sack: 0,
                    window: 0,
                },
                frag: Some(Fragment {
                    msg_id,
                    index,
                    count,
                    total_len: total,
                    am: (index == 0).then_some(am),
                    chunk,
                }),
            };
            let mut buf = take_buf(&mut self.pool);
            // The AM header and payload were checked above and the fragment is cut by the
            // rules: nothing to check again.
            let held = (hold && !chunk.is_empty()).then(|| Held {
                ptr: std::ptr::NonNull::from(chunk).cast(),
                len: chunk.len(),
            });
            wire::encode_built(&pkt, &mut buf, held.is_none());
            peer.segs.push_back(Seg {
                buf,
                held,
                sent_at: 0,
                stamp: 0,
                tx_count: 0,
                sacked: false,
                lost: false,
            });
            off = end;
            pushed(self);
        }
        self.counters.messages_sent += 1;
        Ok(())
    }

    /// The body of [`Proto::send_now`] and [`Proto::send_now_held`], before the deferred ack is
    /// settled.
    pub(super) fn send_direct(
        &mut self,
        dest: Rank,
        msg: &OutMsg<'_>,
        hold: bool,
        mut tx: impl FnMut(Datagram<'_>) -> bool,
        mut clock: impl FnMut() -> u64,
    ) -> Result<Sent, SendError> {
        // Each datagram leaves as soon as it is encoded, while the path stays open: the
        // receiver takes in a long message's first fragments while the sender copies the rest.
        let mut open = true;
        let mut last = None;
        let mut direct = |p: &mut Self| {
            if open {
                last = p.transmit_newest(dest, &mut tx, &mut clock);
                open = last.is_some();
            }
        };
        match self.enqueue_with(dest, msg, hold, &mut direct) {
            Err(SendError::Backpressure(_)) if self.pending.is_some() => {
                // Back-pressure is answered before anything is queued.
                self.settle();
                self.enqueue_with(dest, msg, hold, &mut direct)?;
            }
            r => r?,
        }
        Ok(match last {
            Some(now) if open => Sent::Wire(now),
            _ => Sent::Queued,
        })
    }

    /// Transmits the datagram just queued to `dest` when everything queued before it has been
    /// transmitted and both windows admit it. Returns the time of the transmission, or `None`
    /// when it stays queued for [`Proto::poll_transmit`].
    fn transmit_newest(
        &mut self,
        dest: Rank,
        tx: &mut impl FnMut(Datagram<'_>) -> bool,
        clock: &mut impl FnMut() -> u64,
    ) -> Option<u64> {
        let (recv_window, send_window) = (self.cfg.recv_window, self.cfg.send_window);
        let peer = &mut self.peers[ix(dest)];
        let idx = peer.in_flight();
        if idx + 1 != peer.segs.len() || peer.snd_tx >= peer.send_edge(send_window) {
            return None;
        }
        let (ack, sack, window) = peer.ack_fields(recv_window);
        let seg = peer.segs.get_mut(idx)?;
        // Cannot fail: segment buffers hold at least a header.
        let _ = wire::patch_ack(&mut seg.buf, ack, sack, window);
        if !tx(Datagram {
            dest,
            bytes: &seg.buf,
            tail: seg.tail(),
        }) {
            return None;
        }
        let now = clock();
        self.commit(now, Item::Seg { peer: dest, idx });
        let peer = &self.peers[ix(dest)];
        if peer.twins() {
            if let Some(seg) = peer.segs.get(idx) {
                if tx(Datagram {
                    dest,
                    bytes: &seg.buf,
                    tail: seg.tail(),
                }) {
                    self.commit(now, Item::Twin { peer: dest, idx });
                }
            }
        }
        Some(now)
    }

    /// A message to this rank itself: its payload copied straight to the delivery queue.
    fn send_local(&mut self, am: AmHeader, payload: &[u8]) -> Result<(), SendError> {
        let queued = self.peers[ix(self.me)].ready_dgrams;
        if queued > 0 && to_usize(u64::from(queued)) >= self.cfg.send_queue {
            return Err(SendError::Backpressure(self.me));
        }
        let mut buf = take_buf(&mut self.pool);
        buf.extend_from_slice(payload);
        self.counters.messages_sent += 1;
        self.push_ready(self.me, am, buf, None, 1);
        Ok(())
    }
}
