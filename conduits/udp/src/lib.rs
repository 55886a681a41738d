//! amnet udp conduit: active messages between ranks over UDP datagrams.
//!
//! UDP loses, duplicates and reorders datagrams and caps their size, so this crate brings its
//! own reliability layer. It is built in two pieces that know nothing of sockets:
//!
//! - [`wire`]: the versioned datagram format, with an encoder and a decoder that rejects every
//!   malformed input with a precise error and never panics;
//! - [`proto`]: the protocol as a pure state machine driven by the caller's clock: per-peer
//!   sequencing, cumulative and selective acks, credit-based flow control, adaptive
//!   retransmission, fragmentation and reassembly, heartbeats and failure detection.
//!
//! The socket edge sits on top of [`proto::Proto`] and only moves bytes: [`conduit`] holds the
//! `Conduit` implementation and the clock, with its system calls (batched
//! `sendmmsg`/`recvmmsg`, socket setup), fault injection, local segment and environment
//! settings in private modules of their own. [`auth`] tags and checks datagrams (and the
//! bootstrap connection's frames) with the job's secret when `AMNET_UDP_AUTH=1`.

pub mod auth;
pub mod boot;
pub mod conduit;
mod faults;
pub mod proto;
mod segment;
mod settings;
mod socket;
pub mod spawn;
pub mod wire;

pub use conduit::UdpConduit;

pub use proto::{
    Counters, Datagram, Delivery, LongSink, PeerStatus, Proto, ProtoConfig, ProtoConfigError,
    RxError, SendError, Sent,
};
