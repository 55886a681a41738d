//! A udp job as the launcher sees it: the ranks run on this host or, with `AMNET_UDP_HOSTS` (set
//! by `amrun --hosts`), on other hosts started through `AMNET_SSH`, and the job serves the
//! bootstrap the ranks use to find each other (see [`crate::boot`]). The launcher
//! (`amnet-launch`) starts and watches the ranks.
//!
//! Every job has a fresh secret ([`Secret::random`]) that keys the bootstrap connection's
//! frames and, with `AMNET_UDP_AUTH=1`, the datagrams' tags. It reaches the ranks as
//! `AMNET_UDP_SECRET` through [`JobBackend::rank_secrets`]: in the environment of a local
//! rank, on the standard input of the remote-start command for a remote one, never on a
//! command line.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

use amnet_core::config::{secret_hex, vars, Source};
use amnet_core::job::JobBackend;
use amnet_core::{Error, Result};

use crate::auth::Secret;
use crate::boot::{route_ip, BootServer};

/// The default remote-start command (`AMNET_SSH` overrides it; the host name is appended).
pub const DEFAULT_SSH: &str = "ssh -o BatchMode=yes";

/// A udp job: the bootstrap server and where each rank runs.
#[derive(Debug)]
pub struct UdpJob {
    server: BootServer,
    /// What ranks are told to connect to.
    boot: SocketAddr,
    /// Host of each rank; `None`: this host.
    hosts: Vec<Option<String>>,
    ssh: Vec<String>,
    secret: Secret,
}

fn cfg(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

fn is_local(host: &str) -> bool {
    if matches!(host, "localhost" | "127.0.0.1" | "::1" | "") {
        return true;
    }
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer we own.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r == 0 {
        let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if String::from_utf8_lossy(&buf[..n]) == host {
            return true;
        }
    }
    false
}

/// A fresh job key: what keeps datagrams of other jobs (and stale ones) out.
fn new_job_key() -> u64 {
    let mut k = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut k).is_ok() {
            return u64::from_le_bytes(k) | 1;
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    #[allow(clippy::cast_possible_truncation)] // mixing bits, truncation intended
    let v = (t as u64) ^ (u64::from(std::process::id()) << 32);
    v | 1
}

impl UdpJob {
    /// Set up a job of `ranks` ranks: ranks are spread over `AMNET_UDP_HOSTS` (comma-separated,
    /// in contiguous blocks) when it is set, else all run here.
    pub fn new(ranks: u32, src: &Source) -> Result<UdpJob> {
        let list: Vec<String> = src
            .text(&vars::UDP_HOSTS)
            .unwrap_or_default()
            .split(',')
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .collect();
        let hosts: Vec<Option<String>> = if list.is_empty() {
            vec![None; ranks as usize]
        } else {
            let n = list.len() as u64;
            (0..u64::from(ranks))
                .map(|r| {
                    #[allow(clippy::cast_possible_truncation)] // < list.len()
                    let h = &list[(r * n / u64::from(ranks)) as usize];
                    (!is_local(h)).then(|| h.clone())
                })
                .collect()
        };
        let remote = hosts.iter().flatten().next().cloned();
        let ssh: Vec<String> = src
            .text(&vars::SSH)
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_SSH.to_string())
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let job_key = new_job_key();
        let secret = Secret::random()
            .map_err(|e| cfg(format!("cannot draw the job's secret (getrandom): {e}")))?;
        let (bind, advertise) = match &remote {
            None => {
                let b = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
                (b, None)
            }
            Some(h) => {
                let ip = match src.ip(&vars::UDP_BOOT_ADDR)? {
                    Some(ip) => ip,
                    None => {
                        let peer = (h.as_str(), 22)
                            .to_socket_addrs()
                            .ok()
                            .and_then(|mut a| a.next())
                            .ok_or_else(|| {
                                cfg(format!(
                                    "cannot resolve host {h:?} to find the address the ranks \
                                     should reach the launcher at; set AMNET_UDP_BOOT_ADDR"
                                ))
                            })?;
                        route_ip(peer)?
                    }
                };
                (
                    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
                    Some(ip),
                )
            }
        };
        let server = BootServer::start(bind, ranks, job_key, Some(&secret))?;
        let boot = match advertise {
            None => server.addr(),
            Some(ip) => SocketAddr::new(ip, server.addr().port()),
        };
        Ok(UdpJob {
            server,
            boot,
            hosts,
            ssh,
            secret,
        })
    }
}

impl JobBackend for UdpJob {
    fn rank_env(&self, rank: u32) -> Vec<(String, String)> {
        // The job key reaches the ranks through the bootstrap service, not the environment.
        let mut v = vec![("AMNET_UDP_BOOT".into(), self.boot.to_string())];
        if self.hosts.iter().any(Option::is_some) {
            // Peers on other hosts must reach this rank's socket.
            v.push(("AMNET_UDP_BIND".into(), "0.0.0.0".into()));
        }
        let _ = rank;
        v
    }
    fn rank_secrets(&self, _rank: u32) -> Vec<(String, String)> {
        vec![(vars::UDP_SECRET.name.into(), secret_hex(&self.secret.0))]
    }
    fn exit_flag(&self) -> Option<(i32, Option<u32>)> {
        self.server.exit()
    }
    fn publish_exit(&self, code: i32) {
        self.server.publish_exit(code);
    }
    fn cleanup(&mut self) {
        self.server.stop();
    }
    fn remote_prefix(&self, rank: u32) -> Option<Vec<String>> {
        let host = self.hosts.get(rank as usize)?.as_ref()?;
        let mut p = self.ssh.clone();
        p.push(host.clone());
        Some(p)
    }
}

impl UdpJob {
    /// What went wrong in the bootstrap service (a rank that sent garbage, a lost connection),
    /// for the launcher's report at the end of the job.
    pub fn boot_errors(&self) -> Vec<String> {
        self.server.errors()
    }

    /// The bootstrap service's address, as the ranks are told it (`AMNET_UDP_BOOT`).
    pub fn boot_addr(&self) -> SocketAddr {
        self.boot
    }
}
