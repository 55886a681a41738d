//! Configuration: every `AMNET_*` variable amnet reads, in one table, and the one place they are
//! read and validated.
//!
//! A value comes from, in order: a setting made in code (a builder, through [`Source::set`]),
//! the environment, the default. One rule holds for every variable: unset or empty means the
//! default; anything the variable's [`Kind`] does not accept is an [`Error::Config`] that names
//! the variable, the value and the expected form. The README's table of variables and the
//! configuration dump printed with `AMNET_VERBOSE=1` are both produced from [`VARS`]
//! ([`markdown_table`], [`Source::dump`]).
//!
//! Conduits, the collectives, the launcher, the test suite and the benchmark read their
//! variables through a [`Source`]; nothing else calls `std::env::var` on an `AMNET_` name.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use crate::{Error, Result};

/// The conduits amnet knows, as named by `AMNET_CONDUIT` and `amrun --conduit`. Whether one is
/// built into a program is the umbrella crate's business (`amnet::CONDUITS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ConduitKind {
    /// Shared memory on one host (lock-free rings, direct segment copies).
    Smp,
    /// UDP datagrams with amnet's own reliability protocol, on one host or several.
    Udp,
    /// MPI point-to-point and one-sided communication (cargo feature `amnet/mpi`).
    Mpi,
    /// libfabric's tagged messages and RMA, on any provider it offers (crate `amnet-ofi`).
    Ofi,
    /// InfiniBand verbs: RC queue pairs, RDMA write and read, over libibverbs or the emulated
    /// test device (crate `amnet-ibv`).
    Ibv,
}

impl ConduitKind {
    /// Every kind, in the order of this enum.
    pub const ALL: [ConduitKind; 5] = [
        ConduitKind::Smp,
        ConduitKind::Udp,
        ConduitKind::Mpi,
        ConduitKind::Ofi,
        ConduitKind::Ibv,
    ];

    /// The name used by `AMNET_CONDUIT`, `amrun --conduit` and in messages.
    pub const fn name(self) -> &'static str {
        match self {
            ConduitKind::Smp => "smp",
            ConduitKind::Udp => "udp",
            ConduitKind::Mpi => "mpi",
            ConduitKind::Ofi => "ofi",
            ConduitKind::Ibv => "ibv",
        }
    }
}

impl fmt::Display for ConduitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ConduitKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        ConduitKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::Config(format!(
                    "conduit {s:?}: expected one of smp, udp, mpi, ofi, ibv"
                ))
            })
    }
}

/// Who reads a variable: which part of amnet it configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The AM core, on every conduit.
    Core,
    /// The collectives layer.
    Coll,
    /// One conduit's ranks.
    Conduit(ConduitKind),
    /// The launcher (`amrun`) and a conduit's spawner, not the ranks.
    Launcher,
    /// The conduit test suite.
    TestSuite,
    /// The benchmark binary.
    Bench,
}

impl Scope {
    /// True for the variables a rank of the conduit named `conduit` reads: the core's, the
    /// collectives' and its conduit's own.
    pub fn applies_to_rank(self, conduit: &str) -> bool {
        match self {
            Scope::Core | Scope::Coll => true,
            Scope::Conduit(c) => c.name() == conduit,
            Scope::Launcher | Scope::TestSuite | Scope::Bench => false,
        }
    }
}

/// What values a variable accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `0`, `1`, `no`, `yes`, `false`, `true`.
    Flag,
    /// One of the listed words.
    Choice(&'static [&'static str]),
    /// A whole number in `min..=max`.
    Count {
        /// The smallest accepted value.
        min: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// A positive, finite number of seconds (fractions allowed).
    Seconds,
    /// A probability: a number in `0..=1`.
    Probability,
    /// An IPv4 or IPv6 address.
    Ip,
    /// `HOST:PORT` with an IP address as the host.
    SocketAddr,
    /// A number in hexadecimal, at most 64 bits.
    Hex,
    /// A 128-bit secret as 32 hexadecimal digits. Its value is never shown: the configuration
    /// dump prints `(set)`, errors leave it out, and the launcher never puts it on a command
    /// line.
    Secret,
    /// Any text (a name, a path, a list, a command line).
    Text,
}

impl Kind {
    /// How the accepted values are described in errors and in the README.
    pub fn expected(self) -> String {
        match self {
            Kind::Flag => "0 or 1 (also no/yes, false/true)".into(),
            Kind::Choice(words) => match words {
                [a, b] => format!("{a:?} or {b:?}"),
                _ => format!("one of {}", words.join(", ")),
            },
            Kind::Count { min, max } if max == u64::MAX => format!("a whole number >= {min}"),
            Kind::Count { min, max } => format!("a whole number in {min}..={max}"),
            Kind::Seconds => "a positive number of seconds".into(),
            Kind::Probability => "a probability between 0 and 1".into(),
            Kind::Ip => "an IP address".into(),
            Kind::SocketAddr => "IP:PORT".into(),
            Kind::Hex => "a hexadecimal number".into(),
            Kind::Secret => "32 hexadecimal digits (128 bits)".into(),
            Kind::Text => "text".into(),
        }
    }

    /// True for a kind whose values must not be shown ([`Kind::Secret`]).
    pub fn is_secret(self) -> bool {
        matches!(self, Kind::Secret)
    }

    /// Whether `value` (not empty) is acceptable.
    fn accepts(self, value: &str) -> bool {
        match self {
            Kind::Flag => parse_flag(value).is_some(),
            Kind::Choice(words) => words.contains(&value),
            Kind::Count { min, max } => {
                value.parse::<u64>().is_ok_and(|n| (min..=max).contains(&n))
            }
            Kind::Seconds => parse_seconds(value).is_some(),
            Kind::Probability => value.parse::<f64>().is_ok_and(|p| (0.0..=1.0).contains(&p)),
            Kind::Ip => value.parse::<IpAddr>().is_ok(),
            Kind::SocketAddr => value.parse::<SocketAddr>().is_ok(),
            Kind::Hex => u64::from_str_radix(value, 16).is_ok(),
            Kind::Secret => parse_secret(value).is_some(),
            Kind::Text => true,
        }
    }
}

fn parse_flag(v: &str) -> Option<bool> {
    match v {
        "0" | "no" | "false" => Some(false),
        "1" | "yes" | "true" => Some(true),
        _ => None,
    }
}

fn parse_secret(v: &str) -> Option<[u8; 16]> {
    let digits = v.as_bytes();
    if digits.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let hi = char::from(pair[0]).to_digit(16)?;
        let lo = char::from(pair[1]).to_digit(16)?;
        *o = u8::try_from((hi << 4) | lo).ok()?;
    }
    Some(out)
}

/// `secret` as the 32 lower-case hexadecimal digits a [`Kind::Secret`] variable takes.
pub fn secret_hex(secret: &[u8; 16]) -> String {
    secret.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_seconds(v: &str) -> Option<Duration> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
}

/// One variable: its name, what it accepts, its default and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Var {
    /// The environment variable's name.
    pub name: &'static str,
    /// Who reads it.
    pub scope: Scope,
    /// What it accepts.
    pub kind: Kind,
    /// The default, as documented (`set by amrun` for what the launcher sets per rank).
    pub default: &'static str,
    /// What it does (one sentence, Markdown).
    pub meaning: &'static str,
}

/// Every variable, by name. `VARS` lists them all, in this order.
pub mod vars {
    use super::{ConduitKind, Kind, Scope, Var};

    const SMP: Scope = Scope::Conduit(ConduitKind::Smp);
    const UDP: Scope = Scope::Conduit(ConduitKind::Udp);
    const MPI: Scope = Scope::Conduit(ConduitKind::Mpi);
    const OFI: Scope = Scope::Conduit(ConduitKind::Ofi);
    const IBV: Scope = Scope::Conduit(ConduitKind::Ibv);
    const fn count(min: u64, max: u64) -> Kind {
        Kind::Count { min, max }
    }

    /// `AMNET_CONDUIT`.
    pub const CONDUIT: Var = Var {
        name: "AMNET_CONDUIT",
        scope: Scope::Core,
        kind: Kind::Choice(&["smp", "udp", "mpi", "ofi", "ibv"]),
        default: "`smp`",
        meaning: "conduit used by `amnet::init` and `amrun`",
    };
    /// `AMNET_RANK`.
    pub const RANK: Var = Var {
        name: "AMNET_RANK",
        scope: Scope::Core,
        kind: count(0, u32::MAX as u64),
        default: "set by `amrun`",
        meaning: "this rank, `0..AMNET_SIZE`",
    };
    /// `AMNET_SIZE`.
    pub const SIZE: Var = Var {
        name: "AMNET_SIZE",
        scope: Scope::Core,
        kind: count(1, u32::MAX as u64),
        default: "set by `amrun`",
        meaning: "the job size (smp: at most 256)",
    };
    /// `AMNET_RMA`.
    pub const RMA: Var = Var {
        name: "AMNET_RMA",
        scope: Scope::Core,
        kind: Kind::Choice(&["native", "am"]),
        default: "`native`",
        meaning: "`am` forces put/get onto the AM-based reference path",
    };
    /// `AMNET_HOST_BYPASS`.
    pub const HOST_BYPASS: Var = Var {
        name: "AMNET_HOST_BYPASS",
        scope: Scope::Core,
        kind: Kind::Flag,
        default: "`1`",
        meaning: "udp, mpi, ofi and ibv: ranks that share a host exchange messages and reach each \
                  other's segments through shared memory (the smp conduit's rings); `0` \
                  sends everything through the network",
    };
    /// `AMNET_BARRIER`.
    pub const BARRIER: Var = Var {
        name: "AMNET_BARRIER",
        scope: Scope::Core,
        kind: Kind::Choice(&["flags", "am"]),
        default: "`flags`",
        meaning:
            "`am` runs the endpoint barrier over active messages where all ranks share a host \
                  (default there: flags in the host scratch)",
    };
    /// `AMNET_STATS`.
    pub const STATS: Var = Var {
        name: "AMNET_STATS",
        scope: Scope::Core,
        kind: Kind::Flag,
        default: "`0`",
        meaning: "`1`: each rank prints its message/byte counters on stderr at exit",
    };
    /// `AMNET_VERBOSE`.
    pub const VERBOSE: Var = Var {
        name: "AMNET_VERBOSE",
        scope: Scope::Core,
        kind: Kind::Flag,
        default: "`0`",
        meaning: "`1`: rank 0 prints the configuration (every variable, its value and where \
                  it came from) at attach",
    };
    /// `AMNET_PROGRESS_THREAD`.
    pub const PROGRESS_THREAD: Var = Var {
        name: "AMNET_PROGRESS_THREAD",
        scope: Scope::Core,
        kind: Kind::Flag,
        default: "`0`",
        meaning: "`1`: each rank starts a progress thread at attach, which polls while the \
                  client's threads do not",
    };
    /// `AMNET_SPIN`.
    pub const SPIN: Var = Var {
        name: "AMNET_SPIN",
        scope: Scope::Core,
        kind: count(0, u32::MAX as u64),
        default: "2000 (16 if ranks > cores)",
        meaning: "idle polls a wait spins before it yields, then sleeps",
    };
    /// `AMNET_BOOT_TIMEOUT`.
    pub const BOOT_TIMEOUT: Var = Var {
        name: "AMNET_BOOT_TIMEOUT",
        scope: Scope::Core,
        kind: Kind::Seconds,
        default: "120",
        meaning: "seconds start-up and attach wait for all ranks",
    };
    /// `AMNET_COLL_CHECK`.
    pub const COLL_CHECK: Var = Var {
        name: "AMNET_COLL_CHECK",
        scope: Scope::Coll,
        kind: Kind::Flag,
        default: "`0`",
        meaning: "`1`: compare every collective's arguments across ranks; a difference is an \
                  error naming the ranks",
    };
    /// `AMNET_HANG_TIMEOUT`.
    pub const HANG_TIMEOUT: Var = Var {
        name: "AMNET_HANG_TIMEOUT",
        scope: Scope::Coll,
        kind: Kind::Seconds,
        default: "unset",
        meaning: "seconds: a collective wait without progress that long prints what is in \
                  flight and returns `Error::Hang`",
    };
    /// `AMNET_COLL_TUNE`.
    pub const COLL_TUNE: Var = Var {
        name: "AMNET_COLL_TUNE",
        scope: Scope::Coll,
        kind: Kind::Text,
        default: "unset",
        meaning: "forced algorithm choices, `OP:SIZES:ALGORITHM[:PARAM=VALUE,...]` separated by \
                  `;` (e.g. `broadcast:0-4K:binomial`); see spec/coll.md",
    };
    /// `AMNET_COLL_TUNING`.
    pub const COLL_TUNING: Var = Var {
        name: "AMNET_COLL_TUNING",
        scope: Scope::Coll,
        kind: Kind::Text,
        default: "unset",
        meaning: "a tuning table (as `amnet-tune` writes it): the measured best algorithm per \
                  operation, team size and call size",
    };
    /// `AMNET_COLL_EARLY_BYTES`.
    pub const COLL_EARLY_BYTES: Var = Var {
        name: "AMNET_COLL_EARLY_BYTES",
        scope: Scope::Coll,
        kind: count(1, 1 << 48),
        default: "16777216",
        meaning: "bytes of collective data a rank may hold for collectives it has not entered, \
                  from all other ranks together; a rank further ahead waits (spec/coll.md §6)",
    };
    /// `AMNET_COLL_TRACE`.
    pub const COLL_TRACE: Var = Var {
        name: "AMNET_COLL_TRACE",
        scope: Scope::Coll,
        kind: Kind::Flag,
        default: "`0`",
        meaning: "`1`: team rank 0 of every team prints the team's selection table when the \
                  team is made",
    };
    /// `AMNET_SMP_JOB`.
    pub const SMP_JOB: Var = Var {
        name: "AMNET_SMP_JOB",
        scope: SMP,
        kind: Kind::Text,
        default: "set by `amrun`",
        meaning: "smp: the job's name (prefix of its `/dev/shm` objects)",
    };
    /// `AMNET_UDP_BOOT`.
    pub const UDP_BOOT: Var = Var {
        name: "AMNET_UDP_BOOT",
        scope: UDP,
        kind: Kind::SocketAddr,
        default: "set by `amrun`",
        meaning: "udp, ofi, ibv: where the launcher's bootstrap service listens",
    };
    /// `AMNET_UDP_BIND`.
    pub const UDP_BIND: Var = Var {
        name: "AMNET_UDP_BIND",
        scope: UDP,
        kind: Kind::Ip,
        default: "`127.0.0.1` (`0.0.0.0` in multi-host jobs)",
        meaning: "udp: the address a rank's socket binds to",
    };
    /// `AMNET_UDP_PEER_TIMEOUT`.
    pub const UDP_PEER_TIMEOUT: Var = Var {
        name: "AMNET_UDP_PEER_TIMEOUT",
        scope: UDP,
        kind: Kind::Seconds,
        default: "30",
        meaning: "udp: seconds of silence after which a peer is failed (`Error::PeerFailed` \
                  names it)",
    };
    /// `AMNET_UDP_MTU`.
    pub const UDP_MTU: Var = Var {
        name: "AMNET_UDP_MTU",
        scope: UDP,
        kind: count(512, 65_507),
        default: "65000",
        meaning: "udp: the largest datagram a rank sends, in bytes",
    };
    /// `AMNET_UDP_AUTH`.
    pub const UDP_AUTH: Var = Var {
        name: "AMNET_UDP_AUTH",
        scope: UDP,
        kind: Kind::Flag,
        default: "`0`",
        meaning: "udp: `1`: every datagram carries a 128-bit SipHash-2-4 tag keyed with the \
                  job's secret; a datagram whose tag does not verify is dropped and counted \
                  (`auth_failures`); every rank of a job must agree",
    };
    /// `AMNET_UDP_SECRET`.
    pub const UDP_SECRET: Var = Var {
        name: "AMNET_UDP_SECRET",
        scope: UDP,
        kind: Kind::Secret,
        default: "set by `amrun`",
        meaning:
            "udp, ofi, ibv: the job's secret, fresh per job, which keys the datagram tags and \
                  the bootstrap connection; reaches local ranks in their environment and remote \
                  ones on the standard input of the remote-start command, never on a command \
                  line",
    };
    /// `AMNET_UDP_LOSS`.
    pub const UDP_LOSS: Var = Var {
        name: "AMNET_UDP_LOSS",
        scope: UDP,
        kind: Kind::Probability,
        default: "0",
        meaning: "udp: probability of dropping each outgoing datagram (tests)",
    };
    /// `AMNET_UDP_DUP`.
    pub const UDP_DUP: Var = Var {
        name: "AMNET_UDP_DUP",
        scope: UDP,
        kind: Kind::Probability,
        default: "0",
        meaning: "udp: probability of duplicating each outgoing datagram (tests)",
    };
    /// `AMNET_UDP_REORDER`.
    pub const UDP_REORDER: Var = Var {
        name: "AMNET_UDP_REORDER",
        scope: UDP,
        kind: Kind::Probability,
        default: "0",
        meaning: "udp: probability of holding back each outgoing datagram behind the next \
                  (tests)",
    };
    /// `AMNET_UDP_FORGE`.
    pub const UDP_FORGE: Var = Var {
        name: "AMNET_UDP_FORGE",
        scope: UDP,
        kind: Kind::Probability,
        default: "0",
        meaning: "udp: probability of sending, ahead of each outgoing DATA datagram with a \
                  payload, a forged copy with the payload's last byte changed and a wrong tag \
                  or none (tests)",
    };
    /// `AMNET_UDP_HOSTS`.
    pub const UDP_HOSTS: Var = Var {
        name: "AMNET_UDP_HOSTS",
        scope: Scope::Launcher,
        kind: Kind::Text,
        default: "unset",
        meaning: "udp: comma-separated hosts to spread the ranks over in contiguous blocks \
                  (what `amrun --hosts H1,H2` sets)",
    };
    /// `AMNET_SSH`.
    pub const SSH: Var = Var {
        name: "AMNET_SSH",
        scope: Scope::Launcher,
        kind: Kind::Text,
        default: "`ssh -o BatchMode=yes`",
        meaning: "udp: the command that starts a rank on another host (the host is appended)",
    };
    /// `AMNET_UDP_BOOT_ADDR`.
    pub const UDP_BOOT_ADDR: Var = Var {
        name: "AMNET_UDP_BOOT_ADDR",
        scope: Scope::Launcher,
        kind: Kind::Ip,
        default: "the route to the first remote host",
        meaning: "udp: the launcher's address that ranks on other hosts connect to",
    };
    /// `AMNET_MPI_CREDITS`.
    pub const MPI_CREDITS: Var = Var {
        name: "AMNET_MPI_CREDITS",
        scope: MPI,
        kind: count(2, 1024),
        default: "32",
        meaning: "mpi: messages of each class a rank may have in flight to one peer",
    };
    /// `AMNET_MPI_RMA_CHUNK`.
    pub const MPI_RMA_CHUNK: Var = Var {
        name: "AMNET_MPI_RMA_CHUNK",
        scope: MPI,
        kind: count(1, 1 << 30),
        default: "1073741824",
        meaning: "mpi: bytes per `MPI_Put`/`MPI_Get` of native put/get; larger transfers are \
                  split",
    };
    /// `AMNET_MPI_LONG_PUT`.
    pub const MPI_LONG_PUT: Var = Var {
        name: "AMNET_MPI_LONG_PUT",
        scope: MPI,
        kind: count(1, 65_537),
        default: "256",
        meaning: "mpi: Long payloads of at least this many bytes are put into the target \
                  segment (with native put/get); smaller ones travel with the header",
    };
    /// `AMNET_MPI_EXIT_GRACE`.
    pub const MPI_EXIT_GRACE: Var = Var {
        name: "AMNET_MPI_EXIT_GRACE",
        scope: MPI,
        kind: Kind::Seconds,
        default: "set by `amrun` (`--grace`, 2)",
        meaning: "mpi: how long a rank that ends the job waits for the others to leave",
    };
    /// `AMNET_MPI_REPORT`.
    pub const MPI_REPORT: Var = Var {
        name: "AMNET_MPI_REPORT",
        scope: MPI,
        kind: Kind::Text,
        default: "set by `amrun`",
        meaning: "mpi: file where the rank that ends the job with a non-zero code records it",
    };
    /// `AMNET_MPI_LIFELINE`.
    pub const MPI_LIFELINE: Var = Var {
        name: "AMNET_MPI_LIFELINE",
        scope: MPI,
        kind: Kind::Text,
        default: "set by `amrun` (MPICH)",
        meaning: "mpi: the launcher's socket every rank stays connected to, so that it can \
                  name a rank that died",
    };
    /// `AMNET_MPIRUN`.
    pub const MPIRUN: Var = Var {
        name: "AMNET_MPIRUN",
        scope: Scope::Launcher,
        kind: Kind::Text,
        default: "`mpirun`",
        meaning: "mpi: the MPI launcher command, split at white space",
    };
    /// `AMNET_OFI_PROVIDER_INCLUDE`.
    pub const OFI_PROVIDER_INCLUDE: Var = Var {
        name: "AMNET_OFI_PROVIDER_INCLUDE",
        scope: OFI,
        kind: Kind::Text,
        default: "unset (every provider)",
        meaning: "ofi: comma list of providers to choose from (`tcp`, `shm`, `udp`, ...; a \
                  layered provider matches by any of its names), in libfabric's order",
    };
    /// `AMNET_OFI_PROVIDER_EXCLUDE`.
    pub const OFI_PROVIDER_EXCLUDE: Var = Var {
        name: "AMNET_OFI_PROVIDER_EXCLUDE",
        scope: OFI,
        kind: Kind::Text,
        default: "unset",
        meaning: "ofi: comma list of providers never chosen (matched like the include list)",
    };
    /// `AMNET_OFI_TAG_MODE`.
    pub const OFI_TAG_MODE: Var = Var {
        name: "AMNET_OFI_TAG_MODE",
        scope: OFI,
        kind: Kind::Choice(&["auto", "ofi_tag_1", "ofi_tag_2", "ofi_tag_full"]),
        default: "`auto`",
        meaning: "ofi: the layout of job, source rank and message class in the 64-bit tag \
                  (`auto`: `ofi_tag_full` where the provider offers remote CQ data and \
                  directed receive, else `ofi_tag_1`)",
    };
    /// `AMNET_OFI_PROGRESS_EVENT_CNT`.
    pub const OFI_PROGRESS_EVENT_CNT: Var = Var {
        name: "AMNET_OFI_PROGRESS_EVENT_CNT",
        scope: OFI,
        kind: count(1, 256),
        default: "100",
        meaning: "ofi: completions read per `fi_cq_read` call; a poll reads until the queue \
                  is drained",
    };
    /// `AMNET_OFI_AM_CREDITS`.
    pub const OFI_AM_CREDITS: Var = Var {
        name: "AMNET_OFI_AM_CREDITS",
        scope: OFI,
        kind: count(2, 255),
        default: "64 (16 on `udp;ofi_rxd`)",
        meaning: "ofi: requests a rank may have on their way to one peer before that peer \
                  has run their handlers; the peer returns them in its messages, or in a \
                  credit message once half are due",
    };
    /// `AMNET_OFI_LONG_WRITE`.
    pub const OFI_LONG_WRITE: Var = Var {
        name: "AMNET_OFI_LONG_WRITE",
        scope: OFI,
        kind: Kind::Flag,
        default: "`1`",
        meaning: "ofi: a Long of more than 64 KiB is one `fi_write` with remote CQ data into \
                  the target's segment where native RMA is on and the provider offers remote \
                  CQ data; `0`: always a tagged data message after its header",
    };
    /// `AMNET_IBV_DEVICE`.
    pub const IBV_DEVICE: Var = Var {
        name: "AMNET_IBV_DEVICE",
        scope: IBV,
        kind: Kind::Choice(&["hca", "emu"]),
        default: "`hca`",
        meaning: "ibv: `hca`, an InfiniBand or RoCE device through libibverbs (cargo feature \
                  `amnet/ibv`); `emu`, the emulated test device, which keeps verbs' semantics \
                  between the processes of one host",
    };
    /// `AMNET_IBV_PORTS`.
    pub const IBV_PORTS: Var = Var {
        name: "AMNET_IBV_PORTS",
        scope: IBV,
        kind: Kind::Text,
        default: "unset (the first active port of the first device)",
        meaning: "ibv: the HCAs and ports to use, as GASNet's `GASNET_IBV_PORTS` (`mlx5_0`, \
                  `mlx5_0:1`, `mlx5_0:1+mlx5_1`): the first that exists and is active",
    };
    /// `AMNET_IBV_AM_CREDITS`.
    pub const IBV_AM_CREDITS: Var = Var {
        name: "AMNET_IBV_AM_CREDITS",
        scope: IBV,
        kind: count(2, 255),
        default: "32 (fewer where the device's shared receive queue cannot hold them)",
        meaning: "ibv: requests a rank may have on their way to one peer before that peer has \
                  run their handlers; the peer returns them in its messages, or in a credit \
                  message once half are due. Each rank posts 2 · credits + 2 receive buffers \
                  per peer",
    };
    /// `AMNET_IBV_EMU_FAULT`.
    pub const IBV_EMU_FAULT: Var = Var {
        name: "AMNET_IBV_EMU_FAULT",
        scope: IBV,
        kind: Kind::Text,
        default: "unset",
        meaning: "ibv on the emulated device, for tests: `RANK:N:STATUS` makes the work request \
                  that rank RANK's device runs after N others complete with the error STATUS \
                  (`loc_len`, `loc_qp_op`, `loc_prot`, `flush`, `rem_inv_req`, `rem_access`, \
                  `rem_op`, `retry`, `rnr_retry`)",
    };
    /// `AMNET_STORM`.
    pub const STORM: Var = Var {
        name: "AMNET_STORM",
        scope: Scope::TestSuite,
        kind: count(1, u32::MAX as u64),
        default: "100000",
        meaning: "test suite: messages per rank pair in `am_storm`",
    };
    /// `AMNET_TESTSUITE_SUMMARY`.
    pub const TESTSUITE_SUMMARY: Var = Var {
        name: "AMNET_TESTSUITE_SUMMARY",
        scope: Scope::TestSuite,
        kind: Kind::Text,
        default: "unset",
        meaning: "test suite: file where rank 0 writes `passed failed skipped`",
    };
    /// `AMNET_TEST_SEED`.
    pub const TEST_SEED: Var = Var {
        name: "AMNET_TEST_SEED",
        scope: Scope::TestSuite,
        kind: count(0, u64::MAX),
        default: "fixed per test",
        meaning: "test suite: seed of the collectives' property tests (printed on failure)",
    };
}

/// Every variable amnet reads, in the order of the README's table.
pub const VARS: &[&Var] = &[
    &vars::CONDUIT,
    &vars::RANK,
    &vars::SIZE,
    &vars::RMA,
    &vars::HOST_BYPASS,
    &vars::BARRIER,
    &vars::STATS,
    &vars::VERBOSE,
    &vars::PROGRESS_THREAD,
    &vars::SPIN,
    &vars::BOOT_TIMEOUT,
    &vars::COLL_CHECK,
    &vars::HANG_TIMEOUT,
    &vars::COLL_TUNE,
    &vars::COLL_TUNING,
    &vars::COLL_TRACE,
    &vars::COLL_EARLY_BYTES,
    &vars::SMP_JOB,
    &vars::UDP_BOOT,
    &vars::UDP_BIND,
    &vars::UDP_PEER_TIMEOUT,
    &vars::UDP_MTU,
    &vars::UDP_AUTH,
    &vars::UDP_SECRET,
    &vars::UDP_LOSS,
    &vars::UDP_DUP,
    &vars::UDP_REORDER,
    &vars::UDP_FORGE,
    &vars::UDP_HOSTS,
    &vars::SSH,
    &vars::UDP_BOOT_ADDR,
    &vars::MPI_CREDITS,
    &vars::MPI_RMA_CHUNK,
    &vars::MPI_LONG_PUT,
    &vars::MPI_EXIT_GRACE,
    &vars::MPI_REPORT,
    &vars::MPI_LIFELINE,
    &vars::MPIRUN,
    &vars::OFI_PROVIDER_INCLUDE,
    &vars::OFI_PROVIDER_EXCLUDE,
    &vars::OFI_TAG_MODE,
    &vars::OFI_PROGRESS_EVENT_CNT,
    &vars::OFI_AM_CREDITS,
    &vars::OFI_LONG_WRITE,
    &vars::IBV_DEVICE,
    &vars::IBV_PORTS,
    &vars::IBV_AM_CREDITS,
    &vars::IBV_EMU_FAULT,
    &vars::STORM,
    &vars::TESTSUITE_SUMMARY,
    &vars::TEST_SEED,
];

/// The variable named `name`, if amnet has one.
pub fn lookup(name: &str) -> Option<&'static Var> {
    VARS.iter().copied().find(|v| v.name == name)
}

/// The error for a value `var` does not accept (a secret's value is left out).
pub fn invalid(var: &Var, value: &str) -> Error {
    if var.kind.is_secret() {
        return Error::Config(format!(
            "{} (its value is not shown, {} characters): expected {}",
            var.name,
            value.chars().count(),
            var.kind.expected()
        ));
    }
    Error::Config(format!(
        "{}={value:?}: expected {}",
        var.name,
        var.kind.expected()
    ))
}

/// Where a value in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Set in code (a builder).
    Code,
    /// The environment.
    Env,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Code => "set in code",
            Origin::Env => "environment",
        }
    }
}

/// Where configuration values come from: values set in code first, then the environment.
///
/// `Source::default()` (the same as [`Source::env`]) holds no values of its own. Every reader
/// returns `Ok(None)` for a variable that is unset or empty (the caller applies the default),
/// the parsed value when it is acceptable, and [`Error::Config`] naming the variable, the value
/// and the expected form otherwise.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Source {
    set: BTreeMap<&'static str, String>,
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self.set.iter().map(|(k, v)| {
            let secret = lookup(k).is_some_and(|var| var.kind.is_secret());
            (*k, if secret { "(set)" } else { v.as_str() })
        });
        f.debug_struct("Source")
            .field("set", &BTreeMap::from_iter(shown))
            .finish()
    }
}

impl Source {
    /// The environment alone.
    pub fn env() -> Self {
        Source::default()
    }

    /// Set `name` to `value` in code: it wins over the environment. An empty value means the
    /// default, whatever the environment says. Errors name an unknown variable or a value it
    /// does not accept.
    pub fn set(&mut self, name: &str, value: impl Into<String>) -> Result<&mut Self> {
        let var = lookup(name).ok_or_else(|| {
            Error::Config(format!(
                "{name}: amnet has no such variable (the README lists them)"
            ))
        })?;
        let value = value.into();
        if !value.is_empty() && !var.kind.accepts(&value) {
            return Err(invalid(var, &value));
        }
        self.set.insert(var.name, value);
        Ok(self)
    }

    /// The values set in code, by name.
    pub fn overrides(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.set.iter().map(|(k, v)| (*k, v.as_str()))
    }

    /// The raw value of `var` and where it came from; `None` when unset or empty.
    pub fn raw(&self, var: &Var) -> Option<(String, Origin)> {
        debug_assert!(
            lookup(var.name).is_some(),
            "{} is missing from config::VARS",
            var.name
        );
        let (v, origin) = match self.set.get(var.name) {
            Some(v) => (v.clone(), Origin::Code),
            None => (std::env::var(var.name).ok()?, Origin::Env),
        };
        (!v.is_empty()).then_some((v, origin))
    }

    fn parsed<T>(&self, var: &Var, parse: impl FnOnce(&str) -> Option<T>) -> Result<Option<T>> {
        match self.raw(var) {
            None => Ok(None),
            Some((v, _)) => parse(&v).map(Some).ok_or_else(|| invalid(var, &v)),
        }
    }

    /// A [`Kind::Text`] variable (or any other, unparsed).
    pub fn text(&self, var: &Var) -> Option<String> {
        self.raw(var).map(|(v, _)| v)
    }

    /// A [`Kind::Flag`] variable.
    pub fn flag(&self, var: &Var) -> Result<Option<bool>> {
        self.parsed(var, parse_flag)
    }

    /// A [`Kind::Choice`] variable: the word it names.
    pub fn choice(&self, var: &Var) -> Result<Option<&'static str>> {
        let Kind::Choice(words) = var.kind else {
            return Err(Error::Config(format!("{} is not a choice", var.name)));
        };
        self.parsed(var, |v| words.iter().copied().find(|w| *w == v))
    }

    /// A [`Kind::Count`] variable, checked against its range.
    pub fn count(&self, var: &Var) -> Result<Option<u64>> {
        self.parsed(var, |v| {
            v.parse().ok().filter(|n| var.kind.accepts_count(*n))
        })
    }

    /// A [`Kind::Count`] variable whose range fits a `u32`.
    pub fn count_u32(&self, var: &Var) -> Result<Option<u32>> {
        self.parsed(var, |v| {
            v.parse::<u32>()
                .ok()
                .filter(|n| var.kind.accepts_count(u64::from(*n)))
        })
    }

    /// A [`Kind::Count`] variable whose range fits a `usize`.
    pub fn count_usize(&self, var: &Var) -> Result<Option<usize>> {
        self.parsed(var, |v| {
            v.parse::<usize>()
                .ok()
                .filter(|n| var.kind.accepts_count(*n as u64))
        })
    }

    /// A [`Kind::Seconds`] variable.
    pub fn seconds(&self, var: &Var) -> Result<Option<Duration>> {
        self.parsed(var, parse_seconds)
    }

    /// A [`Kind::Probability`] variable.
    pub fn probability(&self, var: &Var) -> Result<Option<f64>> {
        self.parsed(var, |v| {
            v.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p))
        })
    }

    /// A [`Kind::Ip`] variable.
    pub fn ip(&self, var: &Var) -> Result<Option<IpAddr>> {
        self.parsed(var, |v| v.parse().ok())
    }

    /// A [`Kind::SocketAddr`] variable.
    pub fn socket_addr(&self, var: &Var) -> Result<Option<SocketAddr>> {
        self.parsed(var, |v| v.parse().ok())
    }

    /// A [`Kind::Secret`] variable: its 16 bytes.
    pub fn secret(&self, var: &Var) -> Result<Option<[u8; 16]>> {
        self.parsed(var, parse_secret)
    }

    /// A [`Kind::Hex`] variable.
    pub fn hex(&self, var: &Var) -> Result<Option<u64>> {
        self.parsed(var, |v| u64::from_str_radix(v, 16).ok())
    }

    /// `AMNET_CONDUIT`: the conduit in force (default smp).
    pub fn conduit(&self) -> Result<ConduitKind> {
        Ok(match self.choice(&vars::CONDUIT)? {
            None => ConduitKind::Smp,
            Some(name) => name.parse()?,
        })
    }

    /// `AMNET_BOOT_TIMEOUT`: the limit of a conduit's start-up (joining the job, the start-up
    /// and attach barriers), 120 s by default.
    pub fn boot_timeout(&self) -> Result<Duration> {
        Ok(self
            .seconds(&vars::BOOT_TIMEOUT)?
            .unwrap_or(Duration::from_secs(120)))
    }

    /// Every variable a rank of the conduit named `conduit` reads, with its value in force and
    /// where it came from, one per line (what `AMNET_VERBOSE=1` prints), followed by any
    /// `AMNET_*` variable of the environment that amnet does not know. `resolved` gives the
    /// value a default resolved to where the table's default depends on the job (`AMNET_SPIN`).
    pub fn dump(&self, conduit: &str, resolved: &[(&Var, String)]) -> String {
        let mut s = String::new();
        for var in VARS.iter().filter(|v| v.scope.applies_to_rank(conduit)) {
            let (value, origin) = match self.raw(var) {
                Some((_, o)) if var.kind.is_secret() => ("(set)".to_string(), o.name()),
                Some((v, o)) => (v, o.name()),
                None => match resolved.iter().find(|(r, _)| r.name == var.name) {
                    Some((_, v)) => (v.clone(), "default"),
                    None => (strip_ticks(var.default), "default"),
                },
            };
            s += &format!("amnet config: {:<24} {value} ({origin})\n", var.name);
        }
        let mut unknown: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.starts_with("AMNET_") && lookup(k).is_none())
            .collect();
        unknown.sort();
        for k in unknown {
            s += &format!("amnet config: {k:<24} is set but amnet does not read it\n");
        }
        s
    }
}

impl Kind {
    fn accepts_count(self, n: u64) -> bool {
        matches!(self, Kind::Count { min, max } if (min..=max).contains(&n))
    }
}

fn strip_ticks(s: &str) -> String {
    s.replace('`', "")
}

/// The README's table of variables, in Markdown (a test checks that the README holds exactly
/// this between its `<!-- env-table -->` markers).
pub fn markdown_table() -> String {
    let mut s = String::from("| Variable | Default | Accepts | Meaning |\n|---|---|---|---|\n");
    for v in VARS {
        let accepts = match v.kind {
            Kind::Text => "text".to_string(),
            k => k.expected().replace('"', "`"),
        };
        s += &format!(
            "| `{}` | {} | {} | {} |\n",
            v.name, v.default, accepts, v.meaning
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        for (i, a) in VARS.iter().enumerate() {
            assert!(a.name.starts_with("AMNET_"), "{}", a.name);
            assert!(
                VARS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }

    #[test]
    fn set_in_code_wins_and_is_validated() {
        let mut s = Source::env();
        s.set("AMNET_SPIN", "7").unwrap();
        assert_eq!(s.count_u32(&vars::SPIN).unwrap(), Some(7));
        assert_eq!(s.raw(&vars::SPIN).unwrap().1, Origin::Code);
        let e = Source::env().set("AMNET_SPIN", "lots").unwrap_err();
        assert_eq!(
            e.to_string(),
            "configuration error: AMNET_SPIN=\"lots\": expected a whole number in 0..=4294967295"
        );
        let unknown = format!("AMNET_{}", "NO_SUCH");
        let e = Source::env().set(&unknown, "1").unwrap_err();
        assert!(e.to_string().contains(&unknown), "{e}");
        let e = Source::env().set("AMNET_UDP_LOSS", "2").unwrap_err();
        assert!(e.to_string().contains("between 0 and 1"), "{e}");
    }

    #[test]
    fn empty_means_default() {
        let mut s = Source::env();
        s.set("AMNET_RMA", "").unwrap();
        s.set("AMNET_CONDUIT", "").unwrap();
        assert_eq!(s.choice(&vars::RMA).unwrap(), None);
        assert_eq!(s.conduit().unwrap(), ConduitKind::Smp);
    }

    #[test]
    fn kinds_parse_what_they_describe() {
        let mut s = Source::env();
        s.set("AMNET_STATS", "yes").unwrap();
        s.set("AMNET_HANG_TIMEOUT", "0.5").unwrap();
        s.set("AMNET_UDP_BIND", "::1").unwrap();
        s.set("AMNET_UDP_BOOT", "127.0.0.1:9").unwrap();
        s.set("AMNET_MPI_CREDITS", "1024").unwrap();
        assert_eq!(s.flag(&vars::STATS).unwrap(), Some(true));
        assert_eq!(
            s.seconds(&vars::HANG_TIMEOUT).unwrap(),
            Some(Duration::from_millis(500))
        );
        assert!(s.ip(&vars::UDP_BIND).unwrap().is_some());
        assert!(s.socket_addr(&vars::UDP_BOOT).unwrap().is_some());
        assert_eq!(s.count_u32(&vars::MPI_CREDITS).unwrap(), Some(1024));
        for bad in [("AMNET_MPI_CREDITS", "1"), ("AMNET_MPI_CREDITS", "1025")] {
            let e = Source::env().set(bad.0, bad.1).unwrap_err().to_string();
            assert!(e.contains("2..=1024"), "{e}");
        }
        for bad in ["0", "-1", "inf", "NaN", "x"] {
            assert!(
                Source::env().set("AMNET_BOOT_TIMEOUT", bad).is_err(),
                "{bad}"
            );
        }
        assert!(Source::env().set("AMNET_CONDUIT", "tcp").is_err());
        assert_eq!("udp".parse::<ConduitKind>().unwrap(), ConduitKind::Udp);
    }

    #[test]
    fn dump_lists_the_variables_of_a_rank() {
        let mut s = Source::env();
        s.set("AMNET_SPIN", "3").unwrap();
        let d = s.dump("udp", &[(&vars::BOOT_TIMEOUT, "7".into())]);
        assert!(d.contains("7 (default)"), "{d}");
        assert!(
            d.contains("AMNET_SPIN") && d.contains("3 (set in code)"),
            "{d}"
        );
        assert!(d.contains("AMNET_UDP_MTU"), "{d}");
        assert!(!d.contains("AMNET_MPI_CREDITS"), "{d}");
        assert!(!d.contains("AMNET_STORM"), "{d}");
    }

    #[test]
    fn secrets_parse_and_are_never_shown() {
        let hex = "00112233445566778899aabbccddeeff";
        let mut s = Source::env();
        s.set("AMNET_UDP_SECRET", hex).unwrap();
        let want: [u8; 16] = std::array::from_fn(|i| u8::try_from(i * 0x11).unwrap());
        assert_eq!(s.secret(&vars::UDP_SECRET).unwrap(), Some(want));
        assert_eq!(secret_hex(&want), hex);
        let d = s.dump("udp", &[]);
        assert!(!d.contains(hex) && !d.contains("8899aa"), "{d}");
        assert!(
            d.lines()
                .any(|l| l.contains("AMNET_UDP_SECRET") && l.contains("(set) (set in code)")),
            "{d}"
        );
        let dbg = format!("{s:?}");
        assert!(!dbg.contains(hex) && dbg.contains("(set)"), "{dbg}");
        for bad in [&hex[1..], "00112233445566778899aabbccddeefg", "lots"] {
            let e = Source::env()
                .set("AMNET_UDP_SECRET", bad)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("AMNET_UDP_SECRET") && e.contains("32 hexadecimal digits"),
                "{e}"
            );
            assert!(!e.contains(bad), "{e}");
        }
        let mut s = Source::env();
        s.set("AMNET_UDP_AUTH", "yes").unwrap();
        assert_eq!(s.flag(&vars::UDP_AUTH).unwrap(), Some(true));
    }
}
