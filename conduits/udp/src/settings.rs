//! What the environment asks of a udp rank, read in one place: the job's shape from the
//! launcher (`AMNET_RANK`, `AMNET_SIZE`, `AMNET_UDP_BOOT`), the address to bind
//! (`AMNET_UDP_BIND`), the protocol's parameters (`AMNET_UDP_MTU`, `AMNET_UDP_PEER_TIMEOUT`)
//! and fault injection (`AMNET_UDP_LOSS`, `AMNET_UDP_DUP`, `AMNET_UDP_REORDER`). A value that
//! does not parse is a `Config` error naming the variable.

use std::net::{IpAddr, Ipv4Addr};

use amnet_core::{Error, Result};

use crate::faults::Faults;
use crate::proto::Config;

/// The settings of this rank, as the environment gives them.
#[derive(Debug)]
pub(crate) struct Settings {
    /// `AMNET_RANK`.
    pub(crate) rank: Option<u32>,
    /// `AMNET_SIZE`.
    pub(crate) size: Option<u32>,
    /// `AMNET_UDP_BOOT`: the launcher's bootstrap service (`HOST:PORT`).
    pub(crate) boot: Option<String>,
    /// Fault injection.
    pub(crate) faults: Faults,
    /// The protocol's parameters.
    pub(crate) cfg: Config,
    /// The IP the rank's sockets bind to.
    pub(crate) bind_ip: IpAddr,
}

impl Settings {
    /// Reads every variable; unset or empty ones take their defaults.
    pub(crate) fn from_env() -> Result<Settings> {
        let rank = env_u32("AMNET_RANK")?;
        let size = env_u32("AMNET_SIZE")?;
        let boot = std::env::var("AMNET_UDP_BOOT")
            .ok()
            .filter(|s| !s.is_empty());
        let faults = Faults {
            loss: env_prob("AMNET_UDP_LOSS")?,
            dup: env_prob("AMNET_UDP_DUP")?,
            reorder: env_prob("AMNET_UDP_REORDER")?,
        };
        let mut cfg = Config::default();
        if let Some(t) = env_secs("AMNET_UDP_PEER_TIMEOUT")? {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // positive, finite
            let us = (t * 1e6) as u64;
            cfg.peer_timeout = us.max(2);
            cfg.heartbeat_interval = (cfg.peer_timeout / 4).clamp(1, 1_000_000);
        }
        if let Some(m) = env_u32("AMNET_UDP_MTU")? {
            cfg.mtu = m as usize;
        }
        let bind_ip: IpAddr = match std::env::var("AMNET_UDP_BIND") {
            Ok(v) if !v.is_empty() => v
                .parse()
                .map_err(|_| Error::Config(format!("AMNET_UDP_BIND={v:?}: expected an IP")))?,
            _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        Ok(Settings {
            rank,
            size,
            boot,
            faults,
            cfg,
            bind_ip,
        })
    }
}

fn env_prob(name: &str) -> Result<f64> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => match v.parse::<f64>() {
            Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
            _ => Err(Error::Config(format!(
                "{name}={v:?}: expected a probability between 0 and 1"
            ))),
        },
        _ => Ok(0.0),
    }
}

fn env_secs(name: &str) -> Result<Option<f64>> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => Ok(Some(s)),
            _ => Err(Error::Config(format!(
                "{name}={v:?}: expected a positive number of seconds"
            ))),
        },
        _ => Ok(None),
    }
}

fn env_u32(name: &str) -> Result<Option<u32>> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map(Some)
            .map_err(|_| Error::Config(format!("{name}={v:?}: expected a whole number"))),
        _ => Ok(None),
    }
}
