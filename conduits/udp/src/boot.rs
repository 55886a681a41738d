//! The bootstrap service: how the ranks of a udp job find each other, agree at attach, and
//! learn that the job ends.
//!
//! The launcher runs a [`BootServer`] on a TCP port and tells every rank where it is
//! (`AMNET_UDP_BOOT`). Each rank opens one TCP connection to it ([`BootClient`]), announces its
//! UDP endpoint, and receives every rank's endpoint once all have announced. The same
//! connection then carries the core's collective `exchange` (attach agreement) and exit: a rank
//! that calls `exit(code)` tells the server, which tells every rank; a rank whose connection
//! drops (the launcher died) leaves too. Nothing here is on the message path.
//!
//! Frames on the connection: `len: u32 LE` (kind, body and tag), `kind: u8`, body, and with
//! the job's secret a 16-byte tag (`crate::auth`, the bootstrap key):
//! `SipHash-2-4-128(key, dir: u8, rank: u32 LE, n: u64 LE, kind: u8, body)`, where `dir` is
//! 1 towards the server and 2 towards the rank, `rank` the rank at the connection's other end
//! (its HELLO names it) and `n` the frame's number in its direction on this connection, from
//! 0. A tag thus binds a frame to its job, connection, direction and place in the stream: a
//! frame cannot be forged, changed, replayed, reordered or moved to another rank's
//! connection. The launcher's server always has the secret and refuses a connection whose
//! first frame does not verify; a server without one (tests) takes untagged frames.
//!
//! | kind | direction | body |
//! |---|---|---|
//! | HELLO | rank → server | `rank: u32`, `auth: u8` (1: the rank tags datagrams), UTF-8 socket address of the rank's UDP socket |
//! | TABLE | server → rank | `job_key: u64`, `n: u32`, `n` × (`auth: u8`, `len: u16`, UTF-8 address) |
//! | EXCH | rank → server | `round: u32`, blob |
//! | EXCH_ALL | server → rank | `round: u32`, `n: u32`, `n` × (`len: u32`, blob) |
//! | EXIT | both | `code: i32` |
//! | FAIL | server → rank | UTF-8 reason: the server could not serve this rank (the connection
//! closes after it) |

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use amnet_core::{Error, Result};

use crate::auth::{Mac, Secret, TAG_LEN};

const HELLO: u8 = 1;
const TABLE: u8 = 2;
const EXCH: u8 = 3;
const EXCH_ALL: u8 = 4;
const EXIT: u8 = 5;
const FAIL: u8 = 6;
/// No frame is larger (a blob exchange of a big job still fits easily).
const MAX_FRAME: usize = 64 << 20;
/// The exit word when no exit was requested: zero, as `Conduit::exit_word` wants it.
const NO_EXIT: u64 = 0;

/// The exit word's value for exit code `code` (never [`NO_EXIT`]).
fn exit_value(code: i32) -> u64 {
    (1 << 32) | u64::from(code as u32)
}

/// The exit code in an exit word's value other than [`NO_EXIT`].
#[allow(clippy::cast_possible_truncation)] // the code is the low half
fn exit_code(v: u64) -> i32 {
    v as u32 as i32
}

fn boot_err(msg: impl Into<String>) -> Error {
    Error::conduit("udp", format!("bootstrap: {}", msg.into()))
}

/// Direction of frames towards the server.
const TO_SERVER: u8 = 1;
/// Direction of frames towards a rank.
const TO_RANK: u8 = 2;

fn write_frame(
    s: &mut TcpStream,
    kind: u8,
    body: &[u8],
    tag: Option<&[u8; TAG_LEN]>,
) -> std::io::Result<()> {
    let tag: &[u8] = tag.map_or(&[], |t| t);
    let len = u32::try_from(body.len() + tag.len() + 1)
        .map_err(|_| std::io::Error::other("bootstrap frame too large"))?;
    let mut v = Vec::with_capacity(body.len() + tag.len() + 5);
    v.extend_from_slice(&len.to_le_bytes());
    v.push(kind);
    v.extend_from_slice(body);
    v.extend_from_slice(tag);
    s.write_all(&v)
}

/// What a frame's tag covers before its body: frame number `n` in direction `dir` on the
/// connection of `rank`, of `kind`.
fn frame_prefix(dir: u8, rank: u32, n: u64, kind: u8) -> [u8; 14] {
    let mut p = [0u8; 14];
    p[0] = dir;
    p[1..5].copy_from_slice(&rank.to_le_bytes());
    p[5..13].copy_from_slice(&n.to_le_bytes());
    p[13] = kind;
    p
}

/// The sending half of a connection: with a MAC, its frames carry the tags of `dir` and
/// `rank`, numbered from 0.
#[derive(Debug)]
struct Sender {
    s: TcpStream,
    mac: Option<Mac>,
    dir: u8,
    rank: u32,
    sent: u64,
}

impl Sender {
    fn send(&mut self, kind: u8, body: &[u8]) -> std::io::Result<()> {
        let p = frame_prefix(self.dir, self.rank, self.sent, kind);
        let tag = self.mac.map(|m| m.tag(&[&p, body]));
        self.sent += 1;
        write_frame(&mut self.s, kind, body, tag.as_ref())
    }
}

/// The receiving half of a connection: with a MAC, each frame's tag must be that of `dir`,
/// the rank at the other end and the frame's number; a frame that fails is an
/// `InvalidData` error.
struct Checker {
    mac: Option<Mac>,
    dir: u8,
    /// The rank at the other end; for the server, unknown until the HELLO that names it.
    rank: Option<u32>,
    got: u64,
}

impl Checker {
    fn read(&mut self, s: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
        let (kind, mut body) = read_frame(s)?;
        let Some(mac) = &self.mac else {
            return Ok((kind, body));
        };
        let refuse = |what: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{what} (a peer without the job's AMNET_UDP_SECRET, or a changed frame); \
                     connection dropped"
                ),
            )
        };
        let Some((_, tag)) = body.split_last_chunk::<TAG_LEN>() else {
            return Err(refuse("a frame too short for its tag"));
        };
        let tag = *tag;
        body.truncate(body.len() - TAG_LEN);
        // A rank's first frame is its HELLO, which names it; the tag then proves the name.
        let rank = match (self.rank, body.first_chunk::<4>()) {
            (Some(r), _) => r,
            (None, Some(r)) if kind == HELLO => u32::from_le_bytes(*r),
            (None, _) => return Err(refuse("a first frame that is no HELLO")),
        };
        let p = frame_prefix(self.dir, rank, self.got, kind);
        if !mac.verify(&[&p, &body], &tag) {
            return Err(refuse("a frame whose tag does not verify"));
        }
        self.rank = Some(rank);
        self.got += 1;
        Ok((kind, body))
    }
}

fn read_frame(s: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut l = [0u8; 4];
    s.read_exact(&mut l)?;
    let len = u32::from_le_bytes(l) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "bootstrap frame of {len} bytes"
        )));
    }
    let mut v = vec![0u8; len];
    s.read_exact(&mut v)?;
    let kind = v.remove(0);
    Ok((kind, v))
}

/// A cursor over a frame body; every read checks the length.
struct Body<'a>(&'a [u8]);

impl Body<'_> {
    fn take(&mut self, n: usize) -> std::io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(std::io::Error::other("truncated bootstrap frame"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> std::io::Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> std::io::Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> std::io::Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

fn utf8(b: &[u8]) -> std::io::Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| std::io::Error::other("address is not UTF-8"))
}

// ----- server -------------------------------------------------------------------------------

#[derive(Default)]
struct ServerState {
    conns: Vec<Option<Sender>>,
    /// Each rank's announcement: whether it tags datagrams, and its UDP endpoint.
    addrs: Vec<Option<(bool, String)>>,
    rounds: HashMap<u32, Vec<Option<Vec<u8>>>>,
    exit: Option<(i32, Option<u32>)>,
    /// Connection problems (a rank that sent nonsense), for the launcher's log.
    errors: Vec<String>,
}

struct ServerShared {
    ranks: u32,
    job_key: u64,
    /// The bootstrap MAC of the job's secret: every frame both ways is tagged.
    mac: Option<Mac>,
    st: Mutex<ServerState>,
    stop: AtomicBool,
}

impl ServerShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, ServerState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn broadcast(st: &mut ServerState, kind: u8, body: &[u8]) {
        for c in st.conns.iter_mut().flatten() {
            // A rank that is gone cannot be told; the supervisor sees it die.
            let _ = c.send(kind, body);
        }
    }

    fn set_exit(&self, code: i32, rank: Option<u32>) {
        let mut st = self.lock();
        if st.exit.is_none() {
            st.exit = Some((code, rank));
        }
        let code = st.exit.map_or(code, |e| e.0);
        Self::broadcast(&mut st, EXIT, &code.to_le_bytes());
    }

    /// Serve one rank's connection until it closes.
    fn serve(&self, mut s: TcpStream) {
        let mut me: Option<u32> = None;
        let mut rx = Checker {
            mac: self.mac,
            dir: TO_SERVER,
            rank: None,
            got: 0,
        };
        loop {
            let (kind, body) = match rx.read(&mut s) {
                Ok(f) => f,
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::InvalidData {
                        let who = me.map_or("a connection".to_string(), |r| format!("rank {r}"));
                        self.lock().errors.push(format!("{who}: {e}"));
                    }
                    return;
                }
            };
            let r = self.frame(&mut s, &mut me, kind, &body);
            if let Err(e) = r {
                // Tell the rank why its connection ends (this needs no new descriptor, so it
                // gets through when the launcher ran out of them), and log it. The FAIL frame
                // carries the tag of the rank's next frame; a connection whose HELLO did not
                // verify gets it untagged (and refuses it).
                let mut st = self.lock();
                let why = e.to_string();
                let fail = |c: &mut Sender| c.send(FAIL, why.as_bytes());
                let sent = match rx.rank.and_then(|r| st.conns.get_mut(r as usize)?.as_mut()) {
                    Some(c) => fail(c),
                    None => s.try_clone().and_then(|t| {
                        fail(&mut Sender {
                            s: t,
                            mac: self.mac.filter(|_| rx.rank.is_some()),
                            dir: TO_RANK,
                            rank: rx.rank.unwrap_or(0),
                            sent: 0,
                        })
                    }),
                };
                let _ = sent;
                st.errors.push(format!(
                    "rank {}: {e}",
                    me.map_or("?".to_string(), |r| r.to_string())
                ));
                return;
            }
        }
    }

    fn frame(
        &self,
        s: &mut TcpStream,
        me: &mut Option<u32>,
        kind: u8,
        body: &[u8],
    ) -> std::io::Result<()> {
        let mut b = Body(body);
        match kind {
            HELLO => {
                let rank = b.u32()?;
                let auth = b.take(1)?[0] != 0;
                let addr = utf8(b.0)?;
                if rank >= self.ranks {
                    return Err(std::io::Error::other(format!(
                        "HELLO from rank {rank} in a job of {}",
                        self.ranks
                    )));
                }
                let mut st = self.lock();
                if st.addrs[rank as usize].is_some() {
                    return Err(std::io::Error::other(format!(
                        "rank {rank} said HELLO twice"
                    )));
                }
                *me = Some(rank);
                st.addrs[rank as usize] = Some((auth, addr));
                st.conns[rank as usize] = Some(Sender {
                    s: s.try_clone()?,
                    mac: self.mac,
                    dir: TO_RANK,
                    rank,
                    sent: 0,
                });
                if st.addrs.iter().all(Option::is_some) {
                    let mut t = Vec::new();
                    t.extend_from_slice(&self.job_key.to_le_bytes());
                    t.extend_from_slice(&self.ranks.to_le_bytes());
                    for (auth, a) in st.addrs.iter().flatten() {
                        let n = u16::try_from(a.len()).unwrap_or(0);
                        t.push(u8::from(*auth));
                        t.extend_from_slice(&n.to_le_bytes());
                        t.extend_from_slice(&a.as_bytes()[..usize::from(n)]);
                    }
                    Self::broadcast(&mut st, TABLE, &t);
                }
                // A rank that joins after the job already ended learns it at once.
                if let Some((code, _)) = st.exit {
                    if let Some(c) = st.conns[rank as usize].as_mut() {
                        let _ = c.send(EXIT, &code.to_le_bytes());
                    }
                }
                Ok(())
            }
            EXCH => {
                let Some(rank) = *me else {
                    return Err(std::io::Error::other("EXCH before HELLO"));
                };
                let round = b.u32()?;
                let mut st = self.lock();
                let n = self.ranks as usize;
                let slots = st.rounds.entry(round).or_insert_with(|| vec![None; n]);
                slots[rank as usize] = Some(b.0.to_vec());
                if slots.iter().all(Option::is_some) {
                    let slots = st.rounds.remove(&round).unwrap_or_default();
                    let mut t = Vec::new();
                    t.extend_from_slice(&round.to_le_bytes());
                    t.extend_from_slice(&self.ranks.to_le_bytes());
                    for blob in slots.iter().flatten() {
                        let l = u32::try_from(blob.len()).unwrap_or(u32::MAX);
                        t.extend_from_slice(&l.to_le_bytes());
                        t.extend_from_slice(blob);
                    }
                    Self::broadcast(&mut st, EXCH_ALL, &t);
                }
                Ok(())
            }
            EXIT => {
                let code = i32::from_le_bytes(b.take(4)?.try_into().unwrap_or([0; 4]));
                self.set_exit(code, *me);
                Ok(())
            }
            k => Err(std::io::Error::other(format!("unknown frame kind {k}"))),
        }
    }
}

/// The launcher's side: accepts one connection per rank.
pub struct BootServer {
    shared: Arc<ServerShared>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for BootServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootServer")
            .field("addr", &self.addr)
            .field("ranks", &self.shared.ranks)
            .finish()
    }
}

impl BootServer {
    /// Listen on `bind` (port 0 picks one) for a job of `ranks` ranks with `job_key`. With
    /// `secret`, every frame both ways is tagged with it, and a connection whose frames do not
    /// verify is dropped (and reported by [`BootServer::errors`]).
    pub fn start(
        bind: SocketAddr,
        ranks: u32,
        job_key: u64,
        secret: Option<&Secret>,
    ) -> Result<BootServer> {
        let l = TcpListener::bind(bind)
            .map_err(|e| boot_err(format!("cannot listen on {bind}: {e}")))?;
        let addr = l
            .local_addr()
            .map_err(|e| boot_err(format!("local_addr: {e}")))?;
        let shared = Arc::new(ServerShared {
            ranks,
            job_key,
            mac: secret.map(Mac::bootstrap),
            st: Mutex::new(ServerState {
                conns: (0..ranks).map(|_| None).collect(),
                addrs: vec![None; ranks as usize],
                ..ServerState::default()
            }),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name("amnet-udp-boot".into())
            .spawn(move || {
                for s in l.incoming() {
                    if sh.stop.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(s) = s else { continue };
                    let _ = s.set_nodelay(true);
                    let sh = sh.clone();
                    let _ = std::thread::Builder::new()
                        .name("amnet-udp-boot-conn".into())
                        .spawn(move || sh.serve(s));
                }
            })
            .map_err(|e| boot_err(format!("cannot start the server thread: {e}")))?;
        Ok(BootServer {
            shared,
            addr,
            accept: Some(accept),
        })
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The job-wide exit code and the rank that asked for it (`None`: the launcher did).
    pub fn exit(&self) -> Option<(i32, Option<u32>)> {
        self.shared.lock().exit
    }

    /// End the job with `code` (the first code stands): every connected rank is told.
    pub fn publish_exit(&self, code: i32) {
        self.shared.set_exit(code, None);
    }

    /// Problems seen on the ranks' connections (malformed frames).
    pub fn errors(&self) -> Vec<String> {
        self.shared.lock().errors.clone()
    }

    /// Close every connection and stop accepting.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let mut st = self.shared.lock();
            for c in st.conns.iter_mut().flatten() {
                let _ = c.s.shutdown(Shutdown::Both);
            }
        }
        // Wake the accept loop with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

impl Drop for BootServer {
    fn drop(&mut self) {
        if self.accept.is_some() {
            self.stop();
        }
    }
}

// ----- client -------------------------------------------------------------------------------

/// Exchange answers (round, every rank's blob) from the reader thread.
type Answers = Receiver<(u32, Vec<Vec<u8>>)>;

/// A rank's connection to the bootstrap server.
#[derive(Debug)]
pub struct BootClient {
    w: Mutex<Sender>,
    exit: Arc<AtomicU64>,
    /// The server has told this rank that the job ends (so it knows of the exit).
    exit_heard: Arc<AtomicBool>,
    exch: Mutex<(u32, Answers)>,
    /// The job key the launcher chose.
    pub job_key: u64,
    /// Every rank's UDP endpoint, in rank order.
    pub table: Vec<SocketAddr>,
    /// Whether each rank tags its datagrams (`AMNET_UDP_AUTH`), in rank order.
    pub auth: Vec<bool>,
    /// The address of this end of the connection: the interface that reaches the launcher,
    /// which is the one peers should use too.
    pub local_ip: std::net::IpAddr,
}

/// The local IP a connection to `server` uses, without connecting for real (UDP connect
/// only picks a route).
pub fn route_ip(server: SocketAddr) -> Result<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind(if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .map_err(|e| boot_err(format!("bind: {e}")))?;
    s.connect(server)
        .map_err(|e| boot_err(format!("no route to {server}: {e}")))?;
    Ok(s.local_addr()
        .map_err(|e| boot_err(format!("local_addr: {e}")))?
        .ip())
}

/// How a rank of a conduit that starts its jobs through this bootstrap service without udp's
/// datagrams (ofi, ibv) joined its job: [`join_job`].
#[derive(Debug)]
pub struct Joined {
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// The connection to the launcher's service; `None` in a job of one rank started
    /// without `amrun`.
    pub boot: Option<BootClient>,
    /// Where the service listens (`AMNET_UDP_BOOT`).
    pub server: Option<SocketAddr>,
}

/// Join the job `src` describes, for `conduit` (named in errors): `AMNET_RANK`, `AMNET_SIZE`
/// and the launcher's service `AMNET_UDP_BOOT` (with the job's secret `AMNET_UDP_SECRET`), as
/// `amrun --conduit CONDUIT` sets them, or none of them: a job of one rank. A second join in
/// one process is a configuration error (a process is one rank).
pub fn join_job(src: &amnet_core::Source, conduit: &'static str) -> Result<Joined> {
    use amnet_core::config::vars;
    static JOINED: AtomicBool = AtomicBool::new(false);
    if JOINED.swap(true, Ordering::AcqRel) {
        return Err(Error::Config(
            "amnet::init called twice in one process: a process is one rank; clone the \
             Endpoint to use it from several threads"
                .into(),
        ));
    }
    let rank = src.count_u32(&vars::RANK)?;
    let size = src.count_u32(&vars::SIZE)?;
    let server = src.socket_addr(&vars::UDP_BOOT)?;
    let secret = src.secret(&vars::UDP_SECRET)?.map(crate::auth::Secret);
    match (rank, size, server) {
        (None, None, None) => Ok(Joined {
            rank: 0,
            size: 1,
            boot: None,
            server: None,
        }),
        (Some(rank), Some(size), Some(server)) => {
            if rank >= size {
                return Err(Error::Config(format!(
                    "AMNET_RANK={rank} is not below AMNET_SIZE={size}"
                )));
            }
            let c = BootClient::join(server, rank, 0, src.boot_timeout()?, secret.as_ref(), false)?;
            if c.table.len() != size as usize {
                return Err(Error::conduit(
                    conduit,
                    format!(
                        "the launcher knows {} ranks but AMNET_SIZE is {size}",
                        c.table.len()
                    ),
                ));
            }
            Ok(Joined {
                rank,
                size,
                boot: Some(c),
                server: Some(server),
            })
        }
        _ => Err(Error::Config(format!(
            "AMNET_RANK, AMNET_SIZE and AMNET_UDP_BOOT must be set together (start the job \
             with amrun --conduit {conduit})"
        ))),
    }
}

impl BootClient {
    /// Connect to `server` as `rank`, announce `udp_port` (this rank's UDP port, at the
    /// connection's local IP) and whether it tags datagrams (`auth`), and wait up to
    /// `timeout` for every rank's endpoint. With `secret` every frame both ways is tagged
    /// with it: the server must know it too.
    pub fn join(
        server: SocketAddr,
        rank: u32,
        udp_port: u16,
        timeout: Duration,
        secret: Option<&Secret>,
        auth: bool,
    ) -> Result<BootClient> {
        let deadline = Instant::now() + timeout;
        let s = loop {
            match TcpStream::connect_timeout(&server, Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(boot_err(format!(
                        "cannot reach the launcher at {server}: {e}"
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let _ = s.set_nodelay(true);
        let local_ip = s
            .local_addr()
            .map_err(|e| boot_err(format!("local_addr: {e}")))?
            .ip();
        let me = SocketAddr::new(local_ip, udp_port).to_string();
        let mac = secret.map(Mac::bootstrap);
        let mut hello = rank.to_le_bytes().to_vec();
        hello.push(u8::from(auth));
        hello.extend_from_slice(me.as_bytes());
        let mut r = s
            .try_clone()
            .map_err(|e| boot_err(format!("try_clone: {e}")))?;
        let mut w = Sender {
            s,
            mac,
            dir: TO_SERVER,
            rank,
            sent: 0,
        };
        w.send(HELLO, &hello)
            .map_err(|e| boot_err(format!("HELLO: {e}")))?;
        let mut rx = Checker {
            mac,
            dir: TO_RANK,
            rank: Some(rank),
            got: 0,
        };
        r.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ))
        .map_err(|e| boot_err(format!("set_read_timeout: {e}")))?;
        let exit = Arc::new(AtomicU64::new(NO_EXIT));
        // Wait for the table; an EXIT may come first.
        let (kind, body) = rx.read(&mut r).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                return boot_err(format!(
                    "the launcher's bootstrap service at {server} closed the connection before \
                     every rank joined (the launcher's messages say why; it drops a rank whose \
                     frames do not carry the job's AMNET_UDP_SECRET)"
                ));
            }
            boot_err(format!(
                "waiting for the other ranks to join (timeout {timeout:?}, AMNET_BOOT_TIMEOUT): {e}"
            ))
        })?;
        let (job_key, table, auths) = {
            match kind {
                TABLE => parse_table(&body).map_err(|e| boot_err(format!("TABLE: {e}")))?,
                EXIT => {
                    let code = i32::from_le_bytes(
                        body.get(..4)
                            .and_then(|b| b.try_into().ok())
                            .unwrap_or([0; 4]),
                    );
                    exit.store(exit_value(code), Ordering::Release);
                    return Err(boot_err(format!(
                        "the job ended (code {code}) before it started"
                    )));
                }
                FAIL => {
                    return Err(boot_err(format!(
                        "the launcher's bootstrap service could not serve rank {rank}: {}",
                        String::from_utf8_lossy(&body)
                    )))
                }
                k => return Err(boot_err(format!("unexpected frame kind {k} before TABLE"))),
            }
        };
        r.set_read_timeout(None)
            .map_err(|e| boot_err(format!("set_read_timeout: {e}")))?;
        let (tx, answers) = channel();
        let ex = exit.clone();
        let exit_heard = Arc::new(AtomicBool::new(false));
        let heard = exit_heard.clone();
        std::thread::Builder::new()
            .name("amnet-udp-boot".into())
            .spawn(move || loop {
                match rx.read(&mut r) {
                    Ok((EXIT, body)) => {
                        let code = i32::from_le_bytes(
                            body.get(..4)
                                .and_then(|b| b.try_into().ok())
                                .unwrap_or([0; 4]),
                        );
                        let _ = ex.compare_exchange(
                            NO_EXIT,
                            exit_value(code),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                        heard.store(true, Ordering::Release);
                    }
                    Ok((EXCH_ALL, body)) => {
                        if let Ok(x) = parse_all(&body) {
                            let _ = tx.send(x);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => {
                        // The launcher is gone: leave. Code 1 unless an exit was already known.
                        let _ = ex.compare_exchange(
                            NO_EXIT,
                            exit_value(1),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                        return;
                    }
                }
            })
            .map_err(|e| boot_err(format!("cannot start the reader thread: {e}")))?;
        Ok(BootClient {
            w: Mutex::new(w),
            exit,
            exit_heard,
            exch: Mutex::new((0, answers)),
            job_key,
            table,
            auth: auths,
            local_ip,
        })
    }

    /// The job-wide exit code, once the launcher said the job ends (or the connection to it
    /// dropped: code 1).
    pub fn exit_requested(&self) -> Option<i32> {
        let v = self.exit.load(Ordering::Acquire);
        (v != NO_EXIT).then(|| exit_code(v))
    }

    /// Ask for the job to end with `code`. Returns the code in force (an earlier request
    /// known here wins).
    pub fn request_exit(&self, code: i32) -> i32 {
        let _ = self.exit.compare_exchange(
            NO_EXIT,
            exit_value(code),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        {
            let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
            let _ = w.send(EXIT, &code.to_le_bytes());
        }
        // The launcher must know before this process ends, or it reads the exit status as a
        // rank that died on its own: wait (briefly) for the server's echo.
        let t0 = Instant::now();
        while !self.exit_heard.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.exit_requested().unwrap_or(code)
    }

    /// Collective: every rank contributes `blob`; returns all blobs in rank order. Fails with
    /// `Error::Exit`-like conduit errors if the job ends meanwhile (`on_exit` is called then).
    pub fn exchange(&self, blob: &[u8], on_exit: &dyn Fn(i32)) -> Result<Vec<Vec<u8>>> {
        let mut ex = self.exch.lock().unwrap_or_else(|e| e.into_inner());
        let round = ex.0;
        ex.0 += 1;
        {
            let mut body = round.to_le_bytes().to_vec();
            body.extend_from_slice(blob);
            let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
            w.send(EXCH, &body)
                .map_err(|e| boot_err(format!("EXCH: {e}")))?;
        }
        loop {
            // The answer first: a job-wide exit that arrives right after it must not undo an
            // exchange that completed (the caller then leaves at its next poll).
            match ex.1.recv_timeout(Duration::from_millis(20)) {
                Ok((r, blobs)) if r == round => return Ok(blobs),
                Ok((r, _)) => {
                    return Err(boot_err(format!(
                        "exchange round {r} answered while waiting for round {round}"
                    )))
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(code) = self.exit_requested() {
                        on_exit(code);
                        return Err(boot_err(format!("the job ended with code {code}")));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let code = self.exit_requested().unwrap_or(1);
                    on_exit(code);
                    return Err(boot_err("the connection to the launcher closed"));
                }
            }
        }
    }
}

/// A TABLE: the job key, every rank's endpoint and whether it tags datagrams.
type Table = (u64, Vec<SocketAddr>, Vec<bool>);

fn parse_table(body: &[u8]) -> std::io::Result<Table> {
    let mut b = Body(body);
    let key = b.u64()?;
    let n = b.u32()?;
    let mut v = Vec::with_capacity(n.min(1 << 16) as usize);
    let mut auth = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        auth.push(b.take(1)?[0] != 0);
        let l = b.u16()?;
        let a = utf8(b.take(usize::from(l))?)?;
        v.push(
            a.parse()
                .map_err(|_| std::io::Error::other(format!("bad address {a:?}")))?,
        );
    }
    Ok((key, v, auth))
}

fn parse_all(body: &[u8]) -> std::io::Result<(u32, Vec<Vec<u8>>)> {
    let mut b = Body(body);
    let round = b.u32()?;
    let n = b.u32()?;
    let mut v = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        let l = b.u32()? as usize;
        v.push(b.take(l)?.to_vec());
    }
    Ok((round, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_exchange_exit() {
        join_exchange_exit_with(None);
        join_exchange_exit_with(Some(&Secret([0x5c; 16])));
    }

    fn join_exchange_exit_with(secret: Option<&Secret>) {
        let mut srv = BootServer::start("127.0.0.1:0".parse().unwrap(), 3, 0xabcd, secret).unwrap();
        let addr = srv.addr();
        let out: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u32)
                .map(|r| {
                    s.spawn(move || {
                        let c = BootClient::join(
                            addr,
                            r,
                            4000 + u16::try_from(r).unwrap(),
                            Duration::from_secs(10),
                            secret,
                            r == 2,
                        )
                        .unwrap();
                        assert_eq!(c.job_key, 0xabcd);
                        assert_eq!(c.table.len(), 3);
                        assert_eq!(c.table[2].port(), 4002);
                        assert_eq!(c.auth, [false, false, true]);
                        let all = c.exchange(&[u8::try_from(r).unwrap(); 3], &|_| {}).unwrap();
                        assert_eq!(all, vec![vec![0u8; 3], vec![1u8; 3], vec![2u8; 3]]);
                        let all = c.exchange(&[], &|_| {}).unwrap();
                        assert_eq!(all.len(), 3);
                        if r == 1 {
                            assert_eq!(c.request_exit(5), 5);
                        }
                        let t0 = Instant::now();
                        while c.exit_requested().is_none() {
                            assert!(t0.elapsed() < Duration::from_secs(10));
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        c.exit_requested()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(out, vec![Some(5); 3]);
        assert_eq!(srv.exit(), Some((5, Some(1))));
        assert!(srv.errors().is_empty(), "{:?}", srv.errors());
        srv.stop();
    }

    /// A server with the job's secret drops a rank without it, or with another one, and says
    /// so; a rank with the secret refuses a server without it.
    #[test]
    fn frames_without_the_secret_are_refused() {
        let secret = Secret([7; 16]);
        for theirs in [None, Some(Secret([8; 16]))] {
            let srv =
                BootServer::start("127.0.0.1:0".parse().unwrap(), 1, 1, Some(&secret)).unwrap();
            let e = BootClient::join(
                srv.addr(),
                0,
                1,
                Duration::from_secs(5),
                theirs.as_ref(),
                true,
            )
            .unwrap_err();
            assert!(e.to_string().contains("AMNET_UDP_SECRET"), "{e}");
            let errs = srv.errors();
            assert!(
                errs.len() == 1 && errs[0].contains("connection dropped"),
                "{errs:?}"
            );
        }
        let srv = BootServer::start("127.0.0.1:0".parse().unwrap(), 1, 1, None).unwrap();
        let e = BootClient::join(
            srv.addr(),
            0,
            1,
            Duration::from_secs(5),
            Some(&secret),
            true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("AMNET_UDP_SECRET"), "{e}");
    }

    /// Frames that were tagged but changed, replayed or moved are refused.
    #[test]
    fn changed_replayed_or_moved_frames_are_refused() {
        let secret = Secret([3; 16]);
        let mac = Mac::bootstrap(&secret);
        let frame = |rank: u32, n: u64, kind: u8, body: &[u8]| {
            let tag = mac.tag(&[&frame_prefix(TO_SERVER, rank, n, kind), body]);
            let mut v = Vec::new();
            let len = u32::try_from(1 + body.len() + TAG_LEN).unwrap();
            v.extend_from_slice(&len.to_le_bytes());
            v.push(kind);
            v.extend_from_slice(body);
            v.extend_from_slice(&tag);
            v
        };
        let hello = |rank: u32| {
            let mut b = rank.to_le_bytes().to_vec();
            b.push(0);
            b.extend_from_slice(b"127.0.0.1:9");
            b
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            // The HELLO of rank 1 with its rank changed to 0 afterwards.
            ("changed", {
                let mut f = frame(1, 0, HELLO, &hello(1));
                f[5] = 0;
                f
            }),
            // A valid HELLO, then an EXIT tagged as if it were the connection's first frame
            // again (a replay of a frame from another place in the stream).
            ("replayed", {
                let mut f = frame(0, 0, HELLO, &hello(0));
                f.extend(frame(0, 0, EXIT, &0i32.to_le_bytes()));
                f
            }),
            // A valid HELLO of rank 0, then an EXIT tagged for rank 1's connection.
            ("moved", {
                let mut f = frame(0, 0, HELLO, &hello(0));
                f.extend(frame(1, 1, EXIT, &0i32.to_le_bytes()));
                f
            }),
        ];
        for (what, bytes) in cases {
            let srv =
                BootServer::start("127.0.0.1:0".parse().unwrap(), 2, 1, Some(&secret)).unwrap();
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            s.write_all(&bytes).unwrap();
            let t0 = Instant::now();
            while srv.errors().is_empty() && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(2));
            }
            let errs = srv.errors();
            assert!(
                errs.len() == 1 && errs[0].contains("does not verify"),
                "{what}: {errs:?}"
            );
            assert_eq!(srv.exit(), None, "{what}");
        }
    }

    #[test]
    fn launcher_gone_means_exit() {
        let mut srv = BootServer::start("127.0.0.1:0".parse().unwrap(), 1, 1, None).unwrap();
        let c = BootClient::join(srv.addr(), 0, 1, Duration::from_secs(10), None, false).unwrap();
        srv.stop();
        let t0 = Instant::now();
        while c.exit_requested().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(c.exit_requested(), Some(1));
    }

    #[test]
    fn a_rank_the_server_cannot_serve_is_told_why() {
        // With the secret the FAIL frame is tagged for the rank, which accepts it.
        for secret in [None, Some(Secret([3; 16]))] {
            told_why(secret.as_ref());
        }
    }

    fn told_why(secret: Option<&Secret>) {
        let srv = BootServer::start("127.0.0.1:0".parse().unwrap(), 2, 1, secret).unwrap();
        let e =
            BootClient::join(srv.addr(), 5, 1, Duration::from_secs(10), secret, false).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("could not serve rank 5") && m.contains("HELLO from rank 5"),
            "{m}"
        );
        assert!(
            srv.errors().iter().any(|x| x.contains("rank 5")),
            "{:?}",
            srv.errors()
        );
    }

    #[test]
    fn join_times_out_when_a_rank_is_missing() {
        let srv = BootServer::start("127.0.0.1:0".parse().unwrap(), 2, 1, None).unwrap();
        let e = BootClient::join(srv.addr(), 0, 1, Duration::from_millis(300), None, false)
            .unwrap_err();
        assert!(e.to_string().contains("waiting for the other ranks"), "{e}");
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        for junk in [
            &[0u8, 0, 0, 0][..],
            &[5, 0, 0, 0, 1, 9, 9, 9, 9],
            &[2, 0, 0, 0, 99, 1],
        ] {
            let srv = BootServer::start("127.0.0.1:0".parse().unwrap(), 1, 1, None).unwrap();
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            s.write_all(junk).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(srv);
        }
        assert!(parse_table(&[1, 2, 3]).is_err());
        assert!(parse_all(&[1, 0, 0, 0, 5, 0, 0, 0]).is_err());
    }
}

/// A rank's link to its job's exit and agreement: the bootstrap connection ([`BootClient`])
/// in a launched job, or nothing but a word of its own in a job of one rank. Shared by the
/// conduits that start through the launcher's bootstrap service (udp, ofi).
#[derive(Debug)]
pub struct JobLink {
    boot: Option<BootClient>,
    solo_exit: AtomicU64,
}

impl JobLink {
    /// The link of a launched job (`Some`) or of a job of one rank (`None`).
    pub fn new(boot: Option<BootClient>) -> JobLink {
        JobLink {
            boot,
            solo_exit: AtomicU64::new(NO_EXIT),
        }
    }

    /// The bootstrap connection, in a launched job.
    pub fn client(&self) -> Option<&BootClient> {
        self.boot.as_ref()
    }

    /// A word that is 0 until an exit is requested and non-zero from then on
    /// (`Conduit::exit_word`).
    pub fn exit_word(&self) -> &AtomicU64 {
        match &self.boot {
            Some(b) => &b.exit,
            None => &self.solo_exit,
        }
    }

    /// The job-wide exit code, once any rank asked the job to end.
    pub fn exit_requested(&self) -> Option<i32> {
        match &self.boot {
            Some(b) => b.exit_requested(),
            None => {
                let v = self.solo_exit.load(Ordering::Acquire);
                (v != NO_EXIT).then(|| exit_code(v))
            }
        }
    }

    /// Ask the job to end with `code`; returns the code in force.
    pub fn request_exit(&self, code: i32) -> i32 {
        match &self.boot {
            Some(b) => b.request_exit(code),
            None => {
                let _ = self.solo_exit.compare_exchange(
                    NO_EXIT,
                    exit_value(code),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                self.exit_requested().unwrap_or(code)
            }
        }
    }

    /// Collective: every rank's `blob` in rank order (see [`BootClient::exchange`]; in a job
    /// of one rank, this rank's).
    pub fn exchange(&self, blob: &[u8], on_exit: &dyn Fn(i32)) -> Result<Vec<Vec<u8>>> {
        match &self.boot {
            None => Ok(vec![blob.to_vec()]),
            Some(b) => b.exchange(blob, on_exit),
        }
    }
}
