//! Multi-process bootstrap the torchrun/SLURM way: each process reads its rank from the
//! environment, and rank 0 hands NCCL's unique id to the others over TCP.
//!
//! # The environment
//!
//! `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (the device on this host), `MASTER_ADDR` and `MASTER_PORT`,
//! as torchrun sets them. Under SLURM, `SLURM_PROCID`, `SLURM_NTASKS` and `SLURM_LOCALID` stand in
//! for the first three when those are unset; `MASTER_ADDR` and `MASTER_PORT` are still needed
//! (the first host of the allocation, and a free port).
//!
//! # The exchange
//!
//! Rank 0 makes the id, listens on `MASTER_PORT` (on the loopback address if `MASTER_ADDR` is
//! literally one, an address or `localhost`, else on every interface) and serves it until every
//! other rank has acknowledged it. Every other rank connects to `MASTER_ADDR:MASTER_PORT`,
//! resolving the name and retrying while nobody listens yet, and sends a request: the 8-byte
//! magic `umnccl\0\x02`, its world size and its rank (two little-endian `u32`), and a hash of
//! the job's id ([`Bootstrap::job`], a little-endian `u64`; 0 without one). Rank 0 answers with
//! the magic and a status byte (0: here it is; 1: another world size; 2: not a rank; 3: another
//! job; 4: that rank was counted already in this exchange; 5: that rank is being served on
//! another connection), and on 0 the 128 bytes of the id. The rank acknowledges them (`0x06`
//! and the id's hash, so that a copy of another exchange's acknowledgement counts for nothing),
//! rank 0 counts it and says so (`0x07`), and only then does the rank return the id: a rank
//! that gave up, died or lost the answer is served when it comes back, and a rank never
//! returns the id uncounted. On 4 and 5 a rank tries again until its limit: rank 0 may still
//! serve an exchange before this one (a program that bootstraps twice on one port) and then
//! begin this one; two processes with one `RANK` thus end with one of them in an error at its
//! limit. Rank 0 keeps nothing from one exchange to the next; a rank keeps the id it received
//! within one call, and takes no other on a retry. Where rank 0's last word is lost (rank 0
//! counted the rank, the rank never heard), rank 0 goes on while the rank returns an error; where rank 0 fails (a rank never came), the ranks it counted have returned the id.
//! Either way communicator creation fails within its time limit on the ranks that went on
//! (nonblocking communicators), and every process may bootstrap again.
//!
//! Every step has a deadline: the whole exchange takes at most the bootstrap's time limit on
//! every rank (default 120 s), every read and write included, however slowly a peer sends, and
//! on rank 0 plus the time `make` takes; a rank tries a fresh connection after 6 s on one. Rank 0 serves each connection on a thread of its own,
//! for at most 5 s (its request within 3 s: a link slower than that one way cannot bootstrap),
//! at most 512 at once, so a silent or slow client
//! holds up no other; a flood of more clients than that can keep ranks out until the limit,
//! which then ends in an error on every rank, not a hang. A silent copy of one rank's request
//! keeps that rank out ("busy") for that connection's 5 s; the rank, retrying, is served then. The name lookup (`getaddrinfo`) is
//! the one step without a limit of um's. Nothing is authenticated, as in torchrun's store: the
//! id goes in the clear, and a peer on the network that speaks this protocol can take a rank's
//! place or keep it out until the limit. Run jobs on a network you trust.
//!
//! Only `std::net` is used, so the same program runs unchanged on one host (loopback) or many.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use um_core::{Error, Result};

use crate::poll::Deadline;
use crate::sys::UNIQUE_ID_BYTES;
use crate::types::UniqueId;

/// The protocol's magic and version (2: the request carries the job's id).
const MAGIC: [u8; 8] = *b"umnccl\0\x02";
/// A request: the magic, the world size and the rank (`u32` each), the job's hash (`u64`).
const REQUEST_BYTES: usize = 24;
const OK: u8 = 0;
const WRONG_WORLD: u8 = 1;
const NOT_A_RANK: u8 = 2;
const WRONG_JOB: u8 = 3;
const ALREADY_SERVED: u8 = 4;
/// That rank is being served on another connection now: try again.
const BUSY: u8 = 5;
/// What a rank sends back once it has the whole id, followed by the id's hash (so that a copy
/// of an acknowledgement of another exchange's id counts for nothing); rank 0 counts it served
/// only then.
const ACK: u8 = 0x06;
/// Rank 0's answer to the acknowledgement: the rank is counted, and returns the id only then.
const COUNTED: u8 = 0x07;

/// The longest rank 0 spends on one connection.
const PER_CONNECTION: Duration = Duration::from_secs(5);
/// The longest a rank waits on one connection before it tries a fresh one (a connection whose
/// answer got lost on the way while rank 0 goes on serving).
const PER_ATTEMPT: Duration = Duration::from_secs(6);
/// The longest rank 0 waits for a request once connected (a rank sends it at once; a link
/// slower than this one way cannot bootstrap).
const REQUEST_WITHIN: Duration = Duration::from_secs(3);
/// The most connections rank 0 serves at once.
const MAX_HANDLERS: usize = 512;
/// The stack of a connection's thread (it holds a few hundred bytes).
const HANDLER_STACK: usize = 64 << 10;

/// Where this process stands in a multi-process job, and how it reaches rank 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    rank: usize,
    world_size: usize,
    local_rank: usize,
    master_addr: String,
    master_port: u16,
    timeout: Duration,
    job: Option<String>,
}

fn bad(reason: String) -> Error {
    Error::Bootstrap { reason }
}

impl Bootstrap {
    /// A bootstrap for `rank` of `world_size` on device `local_rank`, meeting rank 0 at
    /// `master_addr:master_port`, with a time limit of 120 s.
    pub fn new(
        rank: usize,
        world_size: usize,
        local_rank: usize,
        master_addr: impl Into<String>,
        master_port: u16,
    ) -> Result<Bootstrap> {
        if world_size == 0 || rank >= world_size || u32::try_from(world_size).is_err() {
            return Err(bad(format!(
                "RANK={rank} and WORLD_SIZE={world_size}: a rank must be below the world size, \
                 which must be between 1 and {}",
                u32::MAX
            )));
        }
        let master_addr = master_addr.into();
        if master_addr.is_empty() {
            return Err(bad("MASTER_ADDR is empty".to_owned()));
        }
        Ok(Bootstrap {
            rank,
            world_size,
            local_rank,
            master_addr,
            master_port,
            timeout: Duration::from_secs(120),
            job: None,
        })
    }

    /// The bootstrap the environment describes (see the module's documentation).
    pub fn from_env() -> Result<Bootstrap> {
        Bootstrap::from_vars(|name| std::env::var(name).ok())
    }

    /// As [`Bootstrap::from_env`], reading variables through `var` (for tests, and for
    /// launchers that keep their own table).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Bootstrap> {
        let number =
            |names: &[&str]| -> Result<Option<usize>> {
                for name in names {
                    if let Some(v) = var(name).filter(|v| !v.is_empty()) {
                        return v.trim().parse().map(Some).map_err(|_| {
                            bad(format!("{name}={v:?} is not a non-negative integer"))
                        });
                    }
                }
                Ok(None)
            };
        let required = |names: &[&str]| -> Result<usize> {
            number(names)?.ok_or_else(|| {
                bad(format!(
                    "{} is not set: launch with torchrun-style variables (RANK, WORLD_SIZE, \
                     LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or under SLURM",
                    names.join(" or ")
                ))
            })
        };
        let rank = required(&["RANK", "SLURM_PROCID"])?;
        let world_size = required(&["WORLD_SIZE", "SLURM_NTASKS"])?;
        let local_rank = number(&["LOCAL_RANK", "SLURM_LOCALID"])?.unwrap_or(rank);
        let master_addr = var("MASTER_ADDR")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| bad("MASTER_ADDR is not set: the host of rank 0".to_owned()))?;
        let port = required(&["MASTER_PORT"])?;
        let master_port = u16::try_from(port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad(format!("MASTER_PORT={port} is not a TCP port (1 to 65535)")))?;
        // Every one that is set: torchrun's run id is "none" unless `--rdzv-id` names it, so
        // alone it would make every torchrun job the same job, SLURM's job id included.
        let parts: Vec<String> = ["UM_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"]
            .iter()
            .filter_map(|name| {
                let torchrun_default = |v: &String| *name == "TORCHELASTIC_RUN_ID" && v == "none";
                var(name)
                    .filter(|v| !v.is_empty() && !torchrun_default(v))
                    .map(|v| format!("{name}={v}"))
            })
            .collect();
        let job = (!parts.is_empty()).then(|| parts.join(" "));
        let boot = Bootstrap::new(rank, world_size, local_rank, master_addr, master_port)?;
        Ok(match job {
            Some(job) => boot.job(job),
            None => boot,
        })
    }

    /// The same bootstrap with another time limit for the whole exchange.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same bootstrap for the job named `job`: rank 0 serves only ranks of the same job,
    /// and a rank refuses a rank 0 of another (an earlier job's rank 0 that still holds the
    /// port, say). [`from_env`](Bootstrap::from_env) makes it of `UM_JOB_ID`,
    /// `TORCHELASTIC_RUN_ID` (unless it is torchrun's default, `none`) and `SLURM_JOB_ID`,
    /// every one that is set; without any, any job of the same world size matches.
    pub fn job(mut self, job: impl Into<String>) -> Self {
        self.job = Some(job.into());
        self
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// This process's device on its host.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// NCCL's unique id for this job: made by rank 0 ([`UniqueId::new`]) and fetched from it by
    /// every other rank.
    pub fn unique_id(&self) -> Result<UniqueId> {
        self.share(|| UniqueId::new().map(|id| *id.as_bytes()))
            .map(UniqueId::from_bytes)
    }

    /// The exchange itself, for any 128 bytes: rank 0 calls `make` and serves its result, the
    /// others fetch it. Every rank returns the same bytes, or an error within the time limit
    /// (on rank 0, plus the time `make` takes: it is not interrupted).
    pub fn share(
        &self,
        make: impl FnOnce() -> Result<[u8; UNIQUE_ID_BYTES]>,
    ) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let deadline = Deadline::after(self.timeout);
        if self.rank == 0 {
            // Listen first, so that early ranks find the port open as soon as possible.
            let listener = self.listen()?;
            let id = make()?;
            self.serve(&listener, id, deadline)?;
            Ok(id)
        } else {
            self.fetch(deadline)
        }
    }

    fn master(&self) -> Result<Vec<SocketAddr>> {
        let host = self
            .master_addr
            .trim_start_matches('[')
            .trim_end_matches(']');
        let addrs: Vec<SocketAddr> = (host, self.master_port)
            .to_socket_addrs()
            .map_err(|e| bad(format!("MASTER_ADDR={}: {e}", self.master_addr)))?
            .collect();
        if addrs.is_empty() {
            return Err(bad(format!(
                "MASTER_ADDR={} names no address",
                self.master_addr
            )));
        }
        Ok(addrs)
    }

    /// Rank 0's listener: on the loopback address where `MASTER_ADDR` names one literally (an
    /// address or `localhost`: a job of one host), else on every interface, so that a host
    /// name that this host resolves to loopback (Debian's `127.0.1.1`) still reaches rank 0
    /// from other hosts.
    fn listen(&self) -> Result<TcpListener> {
        let bind = bind_address(&self.master_addr, &self.master()?, self.master_port);
        let listener = TcpListener::bind(bind)
            .map_err(|e| bad(format!("rank 0 cannot listen on {bind}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| bad(format!("listener: {e}")))?;
        Ok(listener)
    }

    /// Rank 0: accepts connections until every other rank has acknowledged the id, each
    /// connection served on a thread of its own for at most [`PER_CONNECTION`] (its request
    /// within [`REQUEST_WITHIN`], never past `deadline`), so that a silent or slow client holds
    /// up nobody else; at most [`MAX_HANDLERS`] at once (a connection past them is closed, and
    /// a real rank tries again).
    fn serve(
        &self,
        listener: &TcpListener,
        id: [u8; UNIQUE_ID_BYTES],
        deadline: Deadline,
    ) -> Result<()> {
        let table = Arc::new(Table {
            world_size: self.world_size,
            job: job_hash(self.job.as_deref()),
            id,
            state: Mutex::new(Served::default()),
            handlers: AtomicUsize::new(0),
        });
        loop {
            {
                let st = table.lock();
                if st.given.len() + 1 >= self.world_size {
                    return Ok(());
                }
                if deadline.passed() {
                    return Err(bad(format!(
                        "rank 0 waited {} ms on port {}, and rank(s) {} never fetched the id{}",
                        self.timeout.as_millis(),
                        self.master_port,
                        missing(&st.given, self.world_size),
                        if st.last_refusal.is_empty() {
                            String::new()
                        } else {
                            format!(" (last refused request: {})", st.last_refusal)
                        }
                    )));
                }
            }
            match listener.accept() {
                Ok((stream, peer)) => {
                    if table.handlers.load(Ordering::Acquire) >= MAX_HANDLERS {
                        continue; // closed: a real rank tries again
                    }
                    let until = Deadline::after(PER_CONNECTION.min(deadline.left()));
                    table.handlers.fetch_add(1, Ordering::AcqRel);
                    let t = Arc::clone(&table);
                    let spawned = std::thread::Builder::new()
                        .name("um-nccl-bootstrap".to_owned())
                        .stack_size(HANDLER_STACK)
                        .spawn(move || {
                            t.handle(stream, peer, until);
                            t.handlers.fetch_sub(1, Ordering::AcqRel);
                        });
                    if spawned.is_err() {
                        // No thread: the connection was dropped with the closure; a real rank
                        // tries again.
                        table.handlers.fetch_sub(1, Ordering::AcqRel);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors or buffers, a connection aborted in the queue: all
                    // pass (accept(2)); rank 0 tries again until its deadline, and names it.
                    table.lock().last_refusal = format!("accepting: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    fn fetch(&self, deadline: Deadline) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let mut last = String::from("nothing tried");
        // The id this call received and acknowledged, if its count was not confirmed: a retry
        // takes only the same id (rank 0 may have moved on to a next exchange on the port).
        let mut received = None;
        loop {
            if deadline.passed() {
                return Err(bad(format!(
                    "rank {} could not fetch the id from rank 0 at {}:{} within {} ms ({last})",
                    self.rank,
                    self.master_addr,
                    self.master_port,
                    self.timeout.as_millis()
                )));
            }
            // Resolved at every try: a name may resolve only once rank 0's host is up.
            match self.master() {
                Err(e) => last = e.to_string(),
                Ok(addrs) => {
                    for addr in &addrs {
                        let left = deadline.left();
                        if left.is_zero() {
                            break;
                        }
                        match TcpStream::connect_timeout(addr, left.min(Duration::from_secs(1))) {
                            Ok(stream) => match self.request(stream, &mut received, deadline) {
                                Ok(id) => return Ok(id),
                                Err(Fatal::Yes(e)) => return Err(e),
                                Err(Fatal::No(why)) => last = format!("{addr}: {why}"),
                            },
                            Err(e) => last = format!("{addr}: {e}"),
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50).min(deadline.left()));
        }
    }

    fn request(
        &self,
        mut stream: TcpStream,
        received: &mut Option<[u8; UNIQUE_ID_BYTES]>,
        deadline: Deadline,
    ) -> std::result::Result<[u8; UNIQUE_ID_BYTES], Fatal> {
        let retry = |e: std::io::Error| Fatal::No(e.to_string());
        // One connection for at most `PER_ATTEMPT`, then a fresh one.
        let deadline = Deadline::after(PER_ATTEMPT.min(deadline.left()));
        let mut req = Vec::with_capacity(REQUEST_BYTES);
        req.extend_from_slice(&MAGIC);
        // Both fit: `new` checked the world size, and the rank is below it.
        req.extend_from_slice(&(self.world_size as u32).to_le_bytes());
        req.extend_from_slice(&(self.rank as u32).to_le_bytes());
        req.extend_from_slice(&job_hash(self.job.as_deref()).to_le_bytes());
        write_by(&mut stream, &req, deadline).map_err(retry)?;
        let mut head = [0u8; 9];
        read_by(&mut stream, &mut head, deadline).map_err(retry)?;
        if head[..8] != MAGIC {
            return Err(Fatal::Yes(bad(format!(
                "{}:{} answered, but not as this version of um-nccl's rank 0",
                self.master_addr, self.master_port
            ))));
        }
        let refused = |why: String| Err(Fatal::Yes(bad(why)));
        match head[8] {
            OK => {
                let mut id = [0u8; UNIQUE_ID_BYTES];
                read_by(&mut stream, &mut id, deadline).map_err(retry)?;
                if received.is_some_and(|r| r != id) {
                    return Err(Fatal::Yes(bad(format!(
                        "rank {} received rank 0's id, but no word that it was counted, and \
                         rank 0 has moved on to another exchange on port {}",
                        self.rank, self.master_port
                    ))));
                }
                *received = Some(id);
                // Rank 0 counts this rank only on the acknowledgement, and says so: the id is
                // returned only once counted. A lost or late word leaves one side with an
                // error (see the module's documentation), never a rank Ok and uncounted.
                write_by(&mut stream, &ack_of(&id), deadline).map_err(retry)?;
                let mut counted = [0u8; 1];
                read_by(&mut stream, &mut counted, deadline).map_err(retry)?;
                if counted[0] != COUNTED {
                    return Err(Fatal::No("rank 0 did not count this rank".to_owned()));
                }
                Ok(id)
            }
            BUSY => Err(Fatal::No(format!(
                "rank 0 is serving rank {} on another connection",
                self.rank
            ))),
            WRONG_WORLD => refused(format!(
                "rank 0 has another WORLD_SIZE than this rank's {}",
                self.world_size
            )),
            WRONG_JOB => refused(format!(
                "rank 0 at {}:{} serves another job (its job id is not this rank's {:?}): a \
                 rank 0 of an earlier job may still hold the port",
                self.master_addr, self.master_port, self.job
            )),
            // Tried again until the limit: rank 0 may still serve the program's exchange
            // before this one (a second bootstrap on the port), then begin this one.
            ALREADY_SERVED => Err(Fatal::No(format!(
                "rank 0 has counted rank {} already in the exchange it serves: two processes \
                 have RANK={}, or rank 0 has not begun this exchange yet, or this rank's \
                 word that it was counted was lost",
                self.rank, self.rank
            ))),
            NOT_A_RANK => refused(format!(
                "rank 0 refused rank {} as not a rank of the job",
                self.rank
            )),
            other => refused(format!(
                "rank 0 answered with status {other}, which this version does not know"
            )),
        }
    }
}

/// Whether a failed request is worth retrying.
enum Fatal {
    Yes(Error),
    No(String),
}

/// `read_exact` that gives up at `deadline` as a whole, not per read: a peer that sends a
/// byte now and then cannot hold the reader past it.
fn read_by(stream: &mut TcpStream, mut buf: &mut [u8], deadline: Deadline) -> std::io::Result<()> {
    while !buf.is_empty() {
        let left = deadline.left();
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match stream.read(buf) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(e) => timed_out_or(e)?,
        }
    }
    Ok(())
}

/// `write_all` that gives up at `deadline` as a whole.
fn write_by(stream: &mut TcpStream, mut buf: &[u8], deadline: Deadline) -> std::io::Result<()> {
    while !buf.is_empty() {
        let left = deadline.left();
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
        match stream.write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) => timed_out_or(e)?,
        }
    }
    stream.flush()
}

/// `Ok` to go on after an interrupted call; a timed-out socket's error (`WouldBlock` on Linux)
/// as `TimedOut`; any other error as it is.
fn timed_out_or(e: std::io::Error) -> std::io::Result<()> {
    match e.kind() {
        std::io::ErrorKind::Interrupted => Ok(()),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out",
        )),
        _ => Err(e),
    }
}

/// Where rank 0 listens, given `MASTER_ADDR` and what it resolves to (not empty): its
/// loopback address where it names one literally, else every interface of its first address's
/// family.
fn bind_address(master_addr: &str, addrs: &[SocketAddr], port: u16) -> SocketAddr {
    // A number, not a name: digits and dots (`127.1` too, which `getaddrinfo` reads), or an
    // IPv6 address (a name has no `:`).
    let numeric =
        master_addr.contains(':') || master_addr.chars().all(|c| c.is_ascii_digit() || c == '.');
    let literal_loopback = master_addr.eq_ignore_ascii_case("localhost")
        || (numeric && addrs.iter().all(|a| a.ip().is_loopback()));
    match addrs.iter().find(|a| a.ip().is_loopback()) {
        Some(a) if literal_loopback => *a,
        _ if addrs.first().is_some_and(SocketAddr::is_ipv6) => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)
        }
        _ => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
    }
}

/// A rank's acknowledgement of `id`: [`ACK`] and the id's FNV-1a hash.
fn ack_of(id: &[u8; UNIQUE_ID_BYTES]) -> [u8; 9] {
    let h = id.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut ack = [ACK; 9];
    ack[1..].copy_from_slice(&h.to_le_bytes());
    ack
}

/// The job's identity on the wire: FNV-1a of its id, 0 without one.
fn job_hash(job: Option<&str>) -> u64 {
    job.map_or(0, |j| {
        j.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    })
}

/// The first ranks of a world that have not fetched the id, for an error (at most 8 named).
fn missing(served: &BTreeSet<usize>, world_size: usize) -> String {
    let count = world_size - 1 - served.len();
    let named: Vec<String> = (1..world_size)
        .filter(|r| !served.contains(r))
        .take(8)
        .map(|r| r.to_string())
        .collect();
    if count > named.len() {
        format!("{} and {} more", named.join(", "), count - named.len())
    } else {
        named.join(", ")
    }
}

/// What rank 0's connection threads share.
struct Table {
    world_size: usize,
    job: u64,
    id: [u8; UNIQUE_ID_BYTES],
    state: Mutex<Served>,
    /// Connections being served now.
    handlers: AtomicUsize,
}

#[derive(Default)]
struct Served {
    /// The ranks being served on a connection now: another request for one is told to try
    /// again (its connection may be the same rank's retry after a lost answer).
    claimed: BTreeSet<usize>,
    /// The ranks that acknowledged the id: another request for one is refused, two processes
    /// claim it.
    given: BTreeSet<usize>,
    last_refusal: String,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, Served> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serves one connection until `until`; a refusal is kept for rank 0's error.
    fn handle(&self, mut stream: TcpStream, peer: SocketAddr, until: Deadline) {
        if let Err(why) = self.answer(&mut stream, until) {
            self.lock().last_refusal = format!("{peer}: {why}");
        }
    }

    /// Reads a request and answers it; `Err` says why nothing was given.
    fn answer(&self, stream: &mut TcpStream, until: Deadline) -> std::result::Result<(), String> {
        let io = |e: std::io::Error| e.to_string();
        stream.set_nonblocking(false).map_err(io)?;
        let first = Deadline::after(REQUEST_WITHIN.min(until.left()));
        let mut magic = [0u8; 8];
        read_by(stream, &mut magic, first).map_err(io)?;
        if magic != MAGIC {
            return Err("not a request of this version of um-nccl".to_owned());
        }
        let mut req = [0u8; REQUEST_BYTES - 8];
        read_by(stream, &mut req, first).map_err(io)?;
        let world = u32::from_le_bytes([req[0], req[1], req[2], req[3]]) as usize;
        let rank = u32::from_le_bytes([req[4], req[5], req[6], req[7]]) as usize;
        let mut job = [0u8; 8];
        job.copy_from_slice(&req[8..16]);
        let job = u64::from_le_bytes(job);
        let status = if world != self.world_size {
            WRONG_WORLD
        } else if rank == 0 || rank >= self.world_size {
            NOT_A_RANK
        } else if job != self.job {
            WRONG_JOB
        } else {
            let mut st = self.lock();
            if st.given.contains(&rank) {
                ALREADY_SERVED
            } else if !st.claimed.insert(rank) {
                BUSY
            } else {
                OK
            }
        };
        let outcome = self.reply(stream, status, until);
        if status == OK {
            {
                let mut st = self.lock();
                st.claimed.remove(&rank);
                if outcome.is_ok() {
                    st.given.insert(rank);
                }
            }
            if outcome.is_ok() {
                // Counted: say so (if this word is lost, the rank's retry is refused, and it
                // errs while rank 0 goes on).
                let _ = write_by(stream, &[COUNTED], until);
            }
        }
        outcome?;
        match status {
            OK => Ok(()),
            WRONG_WORLD => Err(format!(
                "rank {rank} has WORLD_SIZE={world}, rank 0 {}",
                self.world_size
            )),
            WRONG_JOB => Err(format!("rank {rank} is of another job")),
            ALREADY_SERVED => Err(format!(
                "rank {rank} asked again after it acknowledged the id: two processes have \
                 RANK={rank}"
            )),
            BUSY => Err(format!(
                "rank {rank} asked while being served on another connection"
            )),
            _ => Err(format!(
                "rank {rank} is not a rank of a world of {}",
                self.world_size
            )),
        }
    }

    /// Sends the answer; on `OK`, the id, then waits for the rank's acknowledgement.
    fn reply(
        &self,
        stream: &mut TcpStream,
        status: u8,
        until: Deadline,
    ) -> std::result::Result<(), String> {
        let io = |e: std::io::Error| e.to_string();
        let mut reply = Vec::with_capacity(9 + UNIQUE_ID_BYTES);
        reply.extend_from_slice(&MAGIC);
        reply.push(status);
        if status == OK {
            reply.extend_from_slice(&self.id);
        }
        write_by(stream, &reply, until).map_err(io)?;
        if status == OK {
            let mut ack = [0u8; 9];
            read_by(stream, &mut ack, until).map_err(|e| format!("no acknowledgement: {e}"))?;
            if ack != ack_of(&self.id) {
                return Err("an acknowledgement of another id".to_owned());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Instant;

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port")
    }

    fn id_of(seed: u8) -> [u8; UNIQUE_ID_BYTES] {
        std::array::from_fn(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
    }

    #[test]
    fn every_rank_gets_rank_0_s_bytes_over_loopback() {
        let port = free_port();
        let world = 5;
        let results: Vec<Result<[u8; UNIQUE_ID_BYTES]>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..world)
                .rev() // the others start before rank 0 listens: they retry
                .map(|rank| {
                    s.spawn(move || {
                        Bootstrap::new(rank, world, rank, "127.0.0.1", port)?
                            .timeout(Duration::from_secs(20))
                            .share(|| Ok(id_of(7)))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect()
        });
        for r in results {
            assert_eq!(r.expect("every rank gets the id"), id_of(7));
        }
    }

    #[test]
    fn a_rank_that_never_comes_is_an_error_within_the_time_limit() {
        let port = free_port();
        let t0 = Instant::now();
        let err = Bootstrap::new(0, 3, 0, "127.0.0.1", port)
            .expect("valid")
            .timeout(Duration::from_millis(600))
            .share(|| Ok(id_of(1)))
            .expect_err("ranks 1 and 2 never come");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "bounded: {:?}",
            t0.elapsed()
        );
        let text = err.to_string();
        assert!(text.contains("rank(s) 1, 2 never fetched"), "{text}");
    }

    #[test]
    fn without_rank_0_a_rank_gives_up_within_the_time_limit() {
        let port = free_port();
        let t0 = Instant::now();
        let err = Bootstrap::new(2, 3, 0, "127.0.0.1", port)
            .expect("valid")
            .timeout(Duration::from_millis(500))
            .share(|| Ok(id_of(1)))
            .expect_err("nobody listens");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "bounded: {:?}",
            t0.elapsed()
        );
        assert!(err.to_string().contains("could not fetch the id"), "{err}");
    }

    #[test]
    fn another_world_size_is_refused_on_both_sides() {
        let port = free_port();
        let (server, client) = std::thread::scope(|s| {
            let server = s.spawn(move || {
                Bootstrap::new(0, 2, 0, "127.0.0.1", port)?
                    .timeout(Duration::from_millis(1500))
                    .share(|| Ok(id_of(3)))
            });
            let client = s.spawn(move || {
                Bootstrap::new(1, 4, 1, "127.0.0.1", port)?
                    .timeout(Duration::from_millis(1500))
                    .share(|| Ok(id_of(9)))
            });
            (
                server.join().expect("no panic"),
                client.join().expect("no panic"),
            )
        });
        let c = client.expect_err("refused").to_string();
        assert!(c.contains("another WORLD_SIZE"), "{c}");
        let s = server.expect_err("rank 1 never fetched it").to_string();
        assert!(s.contains("WORLD_SIZE=4"), "{s}");
    }

    #[test]
    fn a_stray_connection_does_not_stop_rank_0() {
        let port = free_port();
        let got = std::thread::scope(|s| {
            let server = s.spawn(move || {
                Bootstrap::new(0, 2, 0, "127.0.0.1", port)?
                    .timeout(Duration::from_secs(20))
                    .share(|| Ok(id_of(5)))
            });
            // Garbage first, then the real rank 1.
            let t0 = Instant::now();
            loop {
                if let Ok(mut junk) = TcpStream::connect(("127.0.0.1", port)) {
                    let _ = junk.write_all(b"GET / HTTP/1.0\r\n\r\n");
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "rank 0 never listened"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            let client = Bootstrap::new(1, 2, 1, "127.0.0.1", port)
                .and_then(|b| b.timeout(Duration::from_secs(20)).share(|| Ok(id_of(0))));
            (server.join().expect("no panic"), client)
        });
        assert_eq!(got.0.expect("rank 0"), id_of(5));
        assert_eq!(got.1.expect("rank 1"), id_of(5));
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn rank_0_listens_on_loopback_only_where_master_addr_literally_names_it() {
        let a = |s: &str| s.parse::<SocketAddr>().expect("address");
        let any4 = a("0.0.0.0:9");
        let any6 = a("[::]:9");
        // A host name this host resolves to loopback (Debian's 127.0.1.1): every interface,
        // so that other hosts, which resolve it to the host's address, reach rank 0.
        assert_eq!(bind_address("node0", &[a("127.0.1.1:9")], 9), any4);
        assert_eq!(bind_address("node0", &[a("10.0.0.5:9")], 9), any4);
        assert_eq!(bind_address("node0", &[a("[fe80::1]:9")], 9), any6);
        assert_eq!(
            bind_address("127.0.0.1", &[a("127.0.0.1:9")], 9),
            a("127.0.0.1:9")
        );
        assert_eq!(bind_address("::1", &[a("[::1]:9")], 9), a("[::1]:9"));
        assert_eq!(bind_address("[::1]", &[a("[::1]:9")], 9), a("[::1]:9"));
        // `127.1` is a number that `getaddrinfo` reads as 127.0.0.1: loopback only.
        assert_eq!(
            bind_address("127.1", &[a("127.0.0.1:9")], 9),
            a("127.0.0.1:9")
        );
        assert_eq!(
            bind_address("LocalHost", &[a("[::1]:9"), a("127.0.0.1:9")], 9),
            a("[::1]:9")
        );
    }

    #[test]
    fn a_missing_list_names_eight_ranks_and_counts_the_rest() {
        let served: BTreeSet<usize> = [1, 3].into_iter().collect();
        assert_eq!(missing(&served, 5), "2, 4");
        assert_eq!(missing(&BTreeSet::new(), 3), "1, 2");
        assert_eq!(
            missing(&served, 1 << 25),
            format!("2, 4, 5, 6, 7, 8, 9, 10 and {} more", (1 << 25) - 3 - 8)
        );
    }

    #[test]
    fn the_job_is_every_job_variable_set_and_torchrun_s_default_is_none() {
        let base = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ];
        let job = |extra: &[(&str, &str)]| {
            let all: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
            Bootstrap::from_vars(vars(&all)).expect("valid").job
        };
        assert_eq!(job(&[]), None);
        assert_eq!(job(&[("TORCHELASTIC_RUN_ID", "none")]), None);
        // Two SLURM jobs under torchrun without --rdzv-id are two jobs.
        let a = job(&[("TORCHELASTIC_RUN_ID", "none"), ("SLURM_JOB_ID", "111")]);
        let b = job(&[("TORCHELASTIC_RUN_ID", "none"), ("SLURM_JOB_ID", "222")]);
        assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
        let c = job(&[("TORCHELASTIC_RUN_ID", "r7"), ("SLURM_JOB_ID", "111")]);
        assert_ne!(a, c);
        assert_eq!(job(&[("UM_JOB_ID", "x")]), Some("UM_JOB_ID=x".to_owned()));
    }

    #[test]
    fn a_job_hash_tells_jobs_apart_and_none_is_zero() {
        assert_eq!(job_hash(None), 0);
        assert_ne!(job_hash(Some("a")), job_hash(Some("b")));
        assert_ne!(job_hash(Some("")), 0);
        assert_eq!(job_hash(Some("12345")), job_hash(Some("12345")));
    }

    #[test]
    fn the_environment_is_read_the_torchrun_and_slurm_ways() {
        let b = Bootstrap::from_vars(vars(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
        ]))
        .expect("torchrun");
        assert_eq!((b.rank(), b.world_size(), b.local_rank()), (3, 8, 1));
        let b = Bootstrap::from_vars(vars(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_LOCALID", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
        ]))
        .expect("slurm");
        assert_eq!((b.rank(), b.world_size(), b.local_rank()), (5, 16, 1));
        // LOCAL_RANK defaults to RANK (one host).
        let b = Bootstrap::from_vars(vars(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "1234"),
        ]))
        .expect("no LOCAL_RANK");
        assert_eq!(b.local_rank(), 1);
    }

    #[test]
    fn a_bad_environment_says_which_variable() {
        let cases: [(&[(&str, &str)], &str); 6] = [
            (
                &[
                    ("WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "1"),
                ],
                "RANK or SLURM_PROCID is not set",
            ),
            (
                &[
                    ("RANK", "x"),
                    ("WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "1"),
                ],
                "RANK=\"x\"",
            ),
            (
                &[
                    ("RANK", "2"),
                    ("WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "1"),
                ],
                "below the world size",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1")],
                "MASTER_ADDR is not set",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "70000"),
                ],
                "not a TCP port",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "0"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "1"),
                ],
                "below the world size",
            ),
        ];
        for (env, want) in cases {
            let err = Bootstrap::from_vars(vars(env)).expect_err(want).to_string();
            assert!(err.contains(want), "{err} lacks {want:?}");
        }
    }
}
