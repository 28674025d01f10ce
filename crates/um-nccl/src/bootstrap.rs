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
//! one, else on every interface) and serves it until every other rank has fetched it. Every
//! other rank connects to `MASTER_ADDR:MASTER_PORT`, retrying while nobody listens yet, and
//! sends a request: the 8-byte magic `umnccl\0\x01`, its world size and its rank (two
//! little-endian `u32`). Rank 0 answers with the magic, a status byte (0: here it is; 1: another
//! world size; 2: not a rank), and on 0 the 128 bytes of the id. Every step has a deadline: the
//! whole exchange takes at most the bootstrap's time limit on every rank (default 120 s),
//! and each connection rank 0 serves at most 5 s of it, so a stray client cannot hold it up.
//! The id is sent in the clear, as torchrun's store sends it: run jobs on a network you trust.
//!
//! Only `std::net` is used, so the same program runs unchanged on one host (loopback) or many.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use um_core::{Error, Result};

use crate::poll::Deadline;
use crate::sys::UNIQUE_ID_BYTES;
use crate::types::UniqueId;

const MAGIC: [u8; 8] = *b"umnccl\0\x01";
const OK: u8 = 0;
const WRONG_WORLD: u8 = 1;
const NOT_A_RANK: u8 = 2;
/// The longest rank 0 spends on one connection.
const PER_CONNECTION: Duration = Duration::from_secs(5);

/// Where this process stands in a multi-process job, and how it reaches rank 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    rank: usize,
    world_size: usize,
    local_rank: usize,
    master_addr: String,
    master_port: u16,
    timeout: Duration,
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
        Bootstrap::new(rank, world_size, local_rank, master_addr, master_port)
    }

    /// The same bootstrap with another time limit for the whole exchange.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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
    /// others fetch it. Every rank returns the same bytes, or an error within the time limit.
    pub fn share(
        &self,
        make: impl FnOnce() -> Result<[u8; UNIQUE_ID_BYTES]>,
    ) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let deadline = Deadline::after(self.timeout);
        if self.rank == 0 {
            // Listen first, so that early ranks find the port open as soon as possible.
            let listener = self.listen()?;
            let id = make()?;
            self.serve(&listener, &id, deadline)?;
            Ok(id)
        } else {
            self.fetch(deadline)
        }
    }

    fn master(&self) -> Result<Vec<SocketAddr>> {
        let addrs: Vec<SocketAddr> = (self.master_addr.as_str(), self.master_port)
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

    fn listen(&self) -> Result<TcpListener> {
        let addrs = self.master()?;
        let bind = match addrs.iter().find(|a| a.ip().is_loopback()) {
            Some(a) => *a,
            None if addrs[0].is_ipv6() => {
                SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), self.master_port)
            }
            None => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), self.master_port),
        };
        let listener = TcpListener::bind(bind)
            .map_err(|e| bad(format!("rank 0 cannot listen on {bind}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| bad(format!("listener: {e}")))?;
        Ok(listener)
    }

    fn serve(
        &self,
        listener: &TcpListener,
        id: &[u8; UNIQUE_ID_BYTES],
        deadline: Deadline,
    ) -> Result<()> {
        let mut served = vec![false; self.world_size];
        served[0] = true;
        let mut last_refusal = String::new();
        while served.iter().any(|s| !s) {
            if deadline.passed() {
                let missing: Vec<String> = served
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| !**s)
                    .map(|(r, _)| r.to_string())
                    .collect();
                return Err(bad(format!(
                    "rank 0 waited {} ms on port {}, and rank(s) {} never fetched the id{}",
                    self.timeout.as_millis(),
                    self.master_port,
                    missing.join(", "),
                    if last_refusal.is_empty() {
                        String::new()
                    } else {
                        format!(" (last refused request: {last_refusal})")
                    }
                )));
            }
            match listener.accept() {
                Ok((stream, peer)) => {
                    let limit = PER_CONNECTION.min(deadline.left());
                    match self.answer(stream, id, limit) {
                        Ok(rank) => served[rank] = true,
                        Err(why) => last_refusal = format!("{peer}: {why}"),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(bad(format!(
                        "rank 0 accepting on port {}: {e}",
                        self.master_port
                    )));
                }
            }
        }
        Ok(())
    }

    /// Serves one connection; the rank it served, or why it refused.
    fn answer(
        &self,
        mut stream: TcpStream,
        id: &[u8; UNIQUE_ID_BYTES],
        limit: Duration,
    ) -> std::result::Result<usize, String> {
        let io = |e: std::io::Error| e.to_string();
        stream.set_nonblocking(false).map_err(io)?;
        stream
            .set_read_timeout(Some(limit.max(Duration::from_millis(1))))
            .map_err(io)?;
        stream
            .set_write_timeout(Some(limit.max(Duration::from_millis(1))))
            .map_err(io)?;
        let mut req = [0u8; 16];
        stream.read_exact(&mut req).map_err(io)?;
        if req[..8] != MAGIC {
            return Err("not a um-nccl request".to_owned());
        }
        let world = u32::from_le_bytes([req[8], req[9], req[10], req[11]]) as usize;
        let rank = u32::from_le_bytes([req[12], req[13], req[14], req[15]]) as usize;
        let status = if world != self.world_size {
            WRONG_WORLD
        } else if rank == 0 || rank >= self.world_size {
            NOT_A_RANK
        } else {
            OK
        };
        let mut reply = Vec::with_capacity(9 + UNIQUE_ID_BYTES);
        reply.extend_from_slice(&MAGIC);
        reply.push(status);
        if status == OK {
            reply.extend_from_slice(id);
        }
        stream.write_all(&reply).map_err(io)?;
        stream.flush().map_err(io)?;
        match status {
            OK => Ok(rank),
            WRONG_WORLD => Err(format!(
                "rank {rank} has WORLD_SIZE={world}, rank 0 {}",
                self.world_size
            )),
            _ => Err(format!(
                "rank {rank} is not a rank of a world of {}",
                self.world_size
            )),
        }
    }

    fn fetch(&self, deadline: Deadline) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let addrs = self.master()?;
        let mut last = String::from("nothing tried");
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
            for addr in &addrs {
                let left = deadline.left();
                if left.is_zero() {
                    break;
                }
                match TcpStream::connect_timeout(addr, left.min(Duration::from_secs(1))) {
                    Ok(stream) => match self.request(stream, left) {
                        Ok(id) => return Ok(id),
                        Err(Fatal::Yes(e)) => return Err(e),
                        Err(Fatal::No(why)) => last = why,
                    },
                    Err(e) => last = format!("{addr}: {e}"),
                }
            }
            std::thread::sleep(Duration::from_millis(50).min(deadline.left()));
        }
    }

    fn request(
        &self,
        mut stream: TcpStream,
        left: Duration,
    ) -> std::result::Result<[u8; UNIQUE_ID_BYTES], Fatal> {
        let retry = |e: std::io::Error| Fatal::No(e.to_string());
        let limit = Some(left.max(Duration::from_millis(1)));
        stream.set_read_timeout(limit).map_err(retry)?;
        stream.set_write_timeout(limit).map_err(retry)?;
        let mut req = Vec::with_capacity(16);
        req.extend_from_slice(&MAGIC);
        // Both fit: `new` checked the world size, and the rank is below it.
        req.extend_from_slice(&(self.world_size as u32).to_le_bytes());
        req.extend_from_slice(&(self.rank as u32).to_le_bytes());
        stream.write_all(&req).map_err(retry)?;
        let mut head = [0u8; 9];
        stream.read_exact(&mut head).map_err(retry)?;
        if head[..8] != MAGIC {
            return Err(Fatal::Yes(bad(format!(
                "{}:{} answered, but not as um-nccl's rank 0",
                self.master_addr, self.master_port
            ))));
        }
        match head[8] {
            OK => {
                let mut id = [0u8; UNIQUE_ID_BYTES];
                stream.read_exact(&mut id).map_err(retry)?;
                Ok(id)
            }
            WRONG_WORLD => Err(Fatal::Yes(bad(format!(
                "rank 0 has another WORLD_SIZE than this rank's {}",
                self.world_size
            )))),
            _ => Err(Fatal::Yes(bad(format!(
                "rank 0 refused rank {} as not a rank of the job",
                self.rank
            )))),
        }
    }
}

/// Whether a failed request is worth retrying.
enum Fatal {
    Yes(Error),
    No(String),
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
