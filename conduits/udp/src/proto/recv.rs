//! A received datagram in: decoded, checked against the job and its addressing, its ack fields
//! handed to `ack`, and its DATA put in sequence. Below the next expected sequence number it
//! is a duplicate; beyond the advertised window it is dropped; ahead of a gap it waits in the
//! reorder buffer; in order it goes to reassembly (`assembler`), followed by whatever it lets
//! out of the reorder buffer.

use amnet_core::Rank;

use crate::wire::{self, AmHeader, Fragment, Packet};

use super::{give_buf, ix, len_u64, take_buf, to_usize, PendingAck, Proto, RxError};

/// The callback of [`Proto::on_datagram_direct`].
pub(super) type Take<'t> = &'t mut dyn FnMut(Rank, &AmHeader, &[u8]) -> bool;

impl Proto {
    /// Takes in one datagram received at `now`: the body of [`Proto::on_datagram`] and, with
    /// `take`, of [`Proto::on_datagram_direct`].
    pub(super) fn ingest(
        &mut self,
        now: u64,
        bytes: &[u8],
        take: Option<Take<'_>>,
    ) -> Result<(), RxError> {
        self.counters.rx_datagrams += 1;
        self.counters.rx_bytes += len_u64(bytes.len());
        // Borrowed where the decoder left it: moving a packet just assembled field by field
        // would read it back in wide loads before its narrow stores have landed.
        let decoded = wire::decode(bytes);
        let pkt = match &decoded {
            Ok(pkt) => pkt,
            Err(e) => {
                self.counters.decode_errors += 1;
                return Err((*e).into());
            }
        };
        let h = &pkt.header;
        if h.job_key != self.key {
            self.counters.foreign_key += 1;
            return Err(RxError::ForeignJob(h.job_key));
        }
        if h.dst != self.me || h.src >= self.nranks || h.src == self.me {
            self.counters.misaddressed += 1;
            return Err(RxError::Misaddressed {
                src: h.src,
                dst: h.dst,
            });
        }
        let peer = &mut self.peers[ix(h.src)];
        if peer.failed {
            self.counters.from_failed += 1;
            return Err(RxError::FailedPeer(h.src));
        }
        peer.last_heard = peer.last_heard.max(now);
        let (Some(f), Some(take)) = (&pkt.frag, take) else {
            let acked = self.on_ack(h.src, now, h.ack, h.sack, h.window);
            let data = match &pkt.frag {
                Some(f) => self.on_data(h.src, now, h.seq, f, bytes, None),
                None => Ok(()),
            };
            return acked.and(data);
        };
        // The data first: a message taken straight off the wire goes to its handler (and its
        // reply to the wire) before its ack fields are applied.
        self.taken = false;
        let data = self.on_data(h.src, now, h.seq, f, bytes, Some(take));
        if !self.taken {
            return self.on_ack(h.src, now, h.ack, h.sack, h.window).and(data);
        }
        if self.ack_is_news(h.src, h.ack)? {
            self.pending = Some(PendingAck {
                src: h.src,
                now,
                ack: h.ack,
                sack: h.sack,
                window: h.window,
            });
        }
        data
    }

    /// Processes a DATA datagram's sequence number and fragment.
    pub(super) fn on_data(
        &mut self,
        src: Rank,
        now: u64,
        seq: u64,
        frag: &Fragment<'_>,
        raw: &[u8],
        take: Option<Take<'_>>,
    ) -> Result<(), RxError> {
        let recv_window = self.cfg.recv_window;
        let peer = &mut self.peers[ix(src)];
        peer.owe_ack(now);
        if seq < peer.rcv_next {
            self.counters.duplicates += 1;
            peer.ack_now = true; // our ack was probably lost
            return Ok(());
        }
        let off = seq - peer.rcv_next;
        if off >= u64::from(peer.advertised(recv_window)) {
            self.counters.out_of_window += 1;
            peer.ack_now = true;
            return Ok(());
        }
        let off = to_usize(off); // below MAX_RECV_WINDOW
        if off > 0 {
            if peer.ooo.len() <= off {
                peer.ooo.resize_with(off + 1, || None);
            }
            if peer.ooo[off].is_some() {
                self.counters.duplicates += 1;
            } else {
                let mut buf = take_buf(&mut self.pool);
                buf.extend_from_slice(raw);
                peer.ooo[off] = Some(buf);
            }
            peer.ack_now = true;
            return Ok(());
        }
        let mut result = self.accept(src, frag, take);
        let peer = &mut self.peers[ix(src)];
        peer.rcv_next += 1;
        peer.unacked_rx += 1;
        peer.ooo.pop_front();
        let mut filled = false;
        loop {
            let peer = &mut self.peers[ix(src)];
            let Some(Some(buf)) = peer.ooo.front_mut().map(Option::take) else {
                break;
            };
            peer.ooo.pop_front();
            peer.rcv_next += 1;
            peer.unacked_rx += 1;
            filled = true;
            let r = match wire::decode(&buf) {
                Ok(Packet { frag: Some(f), .. }) => self.accept(src, &f, None),
                _ => Err(RxError::Protocol {
                    src,
                    what: "buffered datagram does not decode",
                }),
            };
            result = result.and(r);
            give_buf(&mut self.pool, self.cfg.buffer_pool, buf);
        }
        let peer = &mut self.peers[ix(src)];
        if filled || peer.unacked_rx >= self.cfg.ack_every {
            peer.ack_now = true;
        }
        if result.is_err() {
            self.counters.protocol_errors += 1;
        }
        result
    }
}
