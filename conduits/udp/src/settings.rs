//! What the configuration asks of a udp rank, resolved in one place from the core's source
//! (`amnet_core::config`: values set in code, then the environment): the job's shape from the
//! launcher (`AMNET_RANK`, `AMNET_SIZE`, `AMNET_UDP_BOOT`), the address to bind
//! (`AMNET_UDP_BIND`), the protocol's parameters (`AMNET_UDP_MTU`, `AMNET_UDP_PEER_TIMEOUT`),
//! authentication (`AMNET_UDP_AUTH`, `AMNET_UDP_SECRET`), fault injection (`AMNET_UDP_LOSS`,
//! `AMNET_UDP_DUP`, `AMNET_UDP_REORDER`, `AMNET_UDP_FORGE`) and `AMNET_BOOT_TIMEOUT`. A value a
//! variable does not accept is `Error::Config` naming it.

use std::net::{IpAddr, Ipv4Addr};

use std::net::SocketAddr;
use std::time::Duration;

use amnet_core::config::{vars, Kind, Source};
use amnet_core::{Error, Result};

use crate::auth::{Secret, TAG_LEN};
use crate::faults::Faults;
use crate::proto::{ProtoConfig, MIN_MTU};

/// The settings of this rank.
#[derive(Debug)]
pub(crate) struct Settings {
    /// `AMNET_RANK`.
    pub(crate) rank: Option<u32>,
    /// `AMNET_SIZE`.
    pub(crate) size: Option<u32>,
    /// `AMNET_UDP_BOOT`: the launcher's bootstrap service.
    pub(crate) boot: Option<SocketAddr>,
    /// Fault injection.
    pub(crate) faults: Faults,
    /// The protocol's parameters.
    pub(crate) cfg: ProtoConfig,
    /// The IP the rank's sockets bind to.
    pub(crate) bind_ip: IpAddr,
    /// `AMNET_BOOT_TIMEOUT`: how long joining the job may take.
    pub(crate) boot_timeout: Duration,
    /// `AMNET_UDP_AUTH`: datagrams carry tags.
    pub(crate) auth: bool,
    /// `AMNET_UDP_SECRET`: the job's secret, from the launcher.
    pub(crate) secret: Option<Secret>,
}

impl Settings {
    /// Reads every variable from `src`; unset or empty ones take their defaults.
    pub(crate) fn resolve(src: &Source) -> Result<Settings> {
        let faults = Faults {
            loss: src.probability(&vars::UDP_LOSS)?.unwrap_or(0.0),
            dup: src.probability(&vars::UDP_DUP)?.unwrap_or(0.0),
            reorder: src.probability(&vars::UDP_REORDER)?.unwrap_or(0.0),
            forge: src.probability(&vars::UDP_FORGE)?.unwrap_or(0.0),
        };
        let auth = src.flag(&vars::UDP_AUTH)?.unwrap_or(false);
        let mut cfg = ProtoConfig::default();
        if let Some(t) = src.seconds(&vars::UDP_PEER_TIMEOUT)? {
            let us = u64::try_from(t.as_micros()).unwrap_or(u64::MAX);
            cfg.peer_timeout = us.max(2);
            cfg.heartbeat_interval = (cfg.peer_timeout / 4).clamp(1, 1_000_000);
        }
        if let Some(m) = src.count_usize(&vars::UDP_MTU)? {
            cfg.mtu = m;
        }
        if auth {
            // AMNET_UDP_MTU bounds the datagram on the wire, tag included.
            if cfg.mtu < MIN_MTU + TAG_LEN {
                return Err(Error::Config(format!(
                    "AMNET_UDP_MTU={} with AMNET_UDP_AUTH=1: expected at least {} (the tag \
                     takes {TAG_LEN} bytes of each datagram)",
                    cfg.mtu,
                    MIN_MTU + TAG_LEN
                )));
            }
            cfg.mtu -= TAG_LEN;
        }
        Ok(Settings {
            rank: src.count_u32(&vars::RANK)?,
            size: src.count_u32(&vars::SIZE)?,
            boot: src.socket_addr(&vars::UDP_BOOT)?,
            faults,
            cfg,
            bind_ip: src
                .ip(&vars::UDP_BIND)?
                .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            boot_timeout: src.boot_timeout()?,
            auth,
            secret: src.secret(&vars::UDP_SECRET)?.map(Secret),
        })
    }
}

/// The upper and lower bounds `config::VARS` gives a count variable.
const fn bounds(kind: Kind) -> (u64, u64) {
    match kind {
        Kind::Count { min, max } => (min, max),
        _ => (0, 0),
    }
}
const _: () = assert!(bounds(vars::UDP_MTU.kind).0 == crate::proto::MIN_MTU as u64);
const _: () = assert!(bounds(vars::UDP_MTU.kind).1 == crate::wire::MAX_DATAGRAM as u64);
