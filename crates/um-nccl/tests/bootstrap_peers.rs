//! The bootstrap against hostile, confused or slow peers over loopback (no GPU or NCCL needed):
//! two processes claiming one rank are not both served; a relaunched job's ranks are not handed
//! the id of an earlier job whose rank 0 still holds the port; a peer that sends a byte now and
//! then holds neither rank 0 nor a rank past the time limit (code without the limit held them
//! 12 s and 16 s for a 1 s limit); one silent connection does not use up a short limit of every
//! rank; a huge world size is refused without building an error of hundreds of MB or a 3 GB
//! allocation.
//!
//! The time bounds below are several times the limits and far below what code without them
//! took, so that a loaded machine does not fail them.
#![allow(clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use um_core::Result;
use um_nccl::Bootstrap;

mod common;
mod relay;
use common::free_port;

/// Connects to rank 0 on `port`, waiting for it to listen.
fn connect(port: u16) -> TcpStream {
    let t0 = Instant::now();
    loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            return s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never listened");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn rank(r: usize, world: usize, port: u16, limit: Duration) -> Bootstrap {
    Bootstrap::new(r, world, r, "127.0.0.1", port)
        .expect("valid")
        .timeout(limit)
}

#[test]
fn two_processes_claiming_one_rank_get_the_id_once() {
    let port = free_port();
    let limit = Duration::from_secs(3);
    let (r0, a, b) = std::thread::scope(|s| {
        let r0 = s.spawn(move || rank(0, 3, port, limit).share(|| Ok([42u8; 128])));
        let a = s.spawn(move || rank(1, 3, port, limit).share(|| Ok([0u8; 128])));
        let b = s.spawn(move || rank(1, 3, port, limit).share(|| Ok([0u8; 128])));
        (
            r0.join().expect("no panic"),
            a.join().expect("no panic"),
            b.join().expect("no panic"),
        )
    });
    type Claims = Vec<Result<[u8; 128]>>;
    let (got, refused): (Claims, Claims) = [a, b].into_iter().partition(|r| r.is_ok());
    assert_eq!(got.len(), 1, "exactly one claimant of rank 1 gets the id");
    assert_eq!(*got[0].as_ref().expect("ok"), [42u8; 128]);
    // The other tries again until its limit (rank 0 might begin a later exchange), then errs.
    assert!(refused[0].is_err());
    let r0 = r0.expect_err("rank 2 never came").to_string();
    assert!(r0.contains("rank(s) 2 never fetched"), "{r0}");
}

#[test]
fn a_rank_refuses_a_rank_0_of_another_job_on_its_port() {
    let port = free_port();
    let old_id = [0xAAu8; 128];
    let new_id = [0xBBu8; 128];
    let (old0, new) = std::thread::scope(|s| {
        // The old job: rank 1 met rank 0; its rank 2 crashed, so rank 0 keeps serving.
        let old0 = s.spawn(move || {
            rank(0, 3, port, Duration::from_secs(4))
                .job("old")
                .share(|| Ok(old_id))
        });
        let old1 = rank(1, 3, port, Duration::from_secs(4))
            .job("old")
            .share(|| Ok(old_id));
        assert_eq!(old1.expect("old rank 1"), old_id);
        // The new job, on the same port.
        let new: Vec<_> = (0..3)
            .map(|r| {
                s.spawn(move || {
                    rank(r, 3, port, Duration::from_secs(2))
                        .job("new")
                        .share(|| Ok(new_id))
                })
            })
            .collect();
        let new: Vec<_> = new
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect();
        (old0.join().expect("no panic"), new)
    });
    assert!(new[0].is_err(), "the new rank 0 cannot listen");
    for r in &new[1..] {
        let why = r
            .as_ref()
            .expect_err("another job's id refused")
            .to_string();
        assert!(why.contains("serves another job"), "{why}");
    }
    assert!(old0.is_err(), "the old rank 2 never came");
}

#[test]
fn a_client_that_drips_bytes_holds_rank_0_no_longer_than_its_limit() {
    let port = free_port();
    let limit = Duration::from_secs(1);
    let (took, res) = std::thread::scope(|s| {
        let server = s.spawn(move || {
            let t0 = Instant::now();
            let r = rank(0, 2, port, limit).share(|| Ok([1u8; 128]));
            (t0.elapsed(), r)
        });
        let mut c = connect(port);
        // 16 bytes, one every 0.8 s: 12.8 s if each read had its own limit.
        for _ in 0..16 {
            if c.write_all(b"x").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(800));
            if server.is_finished() {
                break;
            }
        }
        server.join().expect("no panic")
    });
    assert!(res.is_err(), "rank 1 never came");
    assert!(
        took < Duration::from_secs(6),
        "held {took:?} for a limit of {limit:?}"
    );
}

#[test]
fn a_rank_0_that_drips_its_answer_holds_a_rank_no_longer_than_its_limit() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let limit = Duration::from_secs(1);
    let (took, res) = std::thread::scope(|s| {
        let client = s.spawn(move || {
            let t0 = Instant::now();
            let r = rank(1, 2, port, limit).share(|| Ok([0u8; 128]));
            (t0.elapsed(), r)
        });
        let (mut c, _) = listener.accept().expect("accept");
        let mut req = [0u8; 24];
        let _ = c.read_exact(&mut req);
        let mut reply = b"umnccl\0\x02\0".to_vec();
        reply.extend_from_slice(&[9u8; 128]);
        // One byte every 0.8 s: 109 s for the whole answer.
        for b in &reply {
            if client.is_finished() || c.write_all(std::slice::from_ref(b)).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(800));
        }
        client.join().expect("no panic")
    });
    assert!(res.is_err(), "the answer never came whole in time");
    assert!(
        took < Duration::from_secs(6),
        "held {took:?} for a limit of {limit:?}"
    );
}

#[test]
fn a_silent_connection_does_not_use_up_a_short_limit() {
    let port = free_port();
    let limit = Duration::from_secs(3);
    let (r0, r1) = std::thread::scope(|s| {
        let r0 = s.spawn(move || rank(0, 2, port, limit).share(|| Ok([3u8; 128])));
        let _stray = connect(port); // connected, says nothing, stays open
        std::thread::sleep(Duration::from_millis(20));
        let r1 = s.spawn(move || rank(1, 2, port, limit).share(|| Ok([0u8; 128])));
        (r0.join().expect("no panic"), r1.join().expect("no panic"))
    });
    assert_eq!(r1.expect("rank 1 served beside the stray"), [3u8; 128]);
    assert_eq!(r0.expect("rank 0 done"), [3u8; 128]);
}

#[test]
fn a_huge_world_is_an_error_within_the_limit_not_an_abort() {
    for world in [1usize << 25, u32::MAX as usize] {
        let port = free_port();
        let t0 = Instant::now();
        let err = rank(0, world, port, Duration::from_millis(100))
            .share(|| Ok([0u8; 128]))
            .expect_err("nobody comes");
        let took = t0.elapsed();
        let text = err.to_string();
        assert!(took < Duration::from_secs(3), "{world}: {took:?}");
        assert!(text.len() < 1000, "{world}: {} bytes", text.len());
        assert!(
            text.contains(&format!("1, 2, 3, 4, 5, 6, 7, 8 and {} more", world - 9)),
            "{text}"
        );
    }
}

/// A limit past what `Instant` holds is a wait without end, not a panic (`now + limit` would
/// overflow `Instant` for `Bootstrap::timeout(Duration::MAX)`).
#[test]
fn a_bootstrap_with_an_endless_limit_shares_the_id() {
    let port = free_port();
    let got: Vec<[u8; 128]> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| s.spawn(move || rank(r, 2, port, Duration::MAX).share(|| Ok([7u8; 128]))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic").expect("the id"))
            .collect()
    });
    assert!(got.iter().all(|id| *id == [7u8; 128]));
}

// ------------------------------------------------------------ answers lost, retries, late ranks
// Rank 0 counted a rank served once its answer was written, not once the rank had it; a rank
// that gave up or lost the answer was then refused on its retry as a duplicate while rank 0
// returned Ok. Now a rank acknowledges the id, a claim being served answers "busy" to another
// request, and rank 0 counts a rank only on its acknowledgement.

/// A request as a rank of a world of `world` sends it, without a job.
fn request(world: u32, rank: u32) -> Vec<u8> {
    let mut req = b"umnccl\0\x02".to_vec();
    req.extend_from_slice(&world.to_le_bytes());
    req.extend_from_slice(&rank.to_le_bytes());
    req.extend_from_slice(&0u64.to_le_bytes());
    req
}

/// Rank 1 starts first and gives up while its request waits in rank 0's backlog (rank 0's
/// `make` is slow); rank 0 writes the id to a closed connection. The retry must get the id.
#[test]
fn a_rank_that_gave_up_in_rank_0_s_backlog_is_served_on_its_retry() {
    let port = free_port();
    let id = [0x5Au8; 128];
    let (r0, first, retry) = std::thread::scope(|s| {
        let first =
            s.spawn(move || rank(1, 2, port, Duration::from_secs(2)).share(|| Ok([0u8; 128])));
        let r0 = s.spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            rank(0, 2, port, Duration::from_secs(3)).share(|| {
                std::thread::sleep(Duration::from_millis(1500));
                Ok(id)
            })
        });
        let first = first.join().expect("no panic");
        let retry = rank(1, 2, port, Duration::from_secs(4)).share(|| Ok([0u8; 128]));
        (r0.join().expect("no panic"), first, retry)
    });
    assert!(
        first.is_err(),
        "the first rank 1 gave up before rank 0 served"
    );
    assert_eq!(retry.expect("the retry is served"), id);
    assert_eq!(r0.expect("rank 0 done"), id);
}

/// A rank's process that dies right after its request: not counted; its restart is served.
#[test]
fn a_rank_that_dies_after_its_request_is_served_when_it_comes_back() {
    let port = free_port();
    let id = [0x33u8; 128];
    let (r0, again) = std::thread::scope(|s| {
        let r0 = s.spawn(move || rank(0, 3, port, Duration::from_secs(5)).share(|| Ok(id)));
        let r1 = s.spawn(move || rank(1, 3, port, Duration::from_secs(5)).share(|| Ok([0u8; 128])));
        let mut c = connect(port);
        c.write_all(&request(3, 2)).expect("request");
        drop(c);
        std::thread::sleep(Duration::from_millis(300));
        let again = rank(2, 3, port, Duration::from_secs(4)).share(|| Ok([0u8; 128]));
        assert_eq!(r1.join().expect("no panic").expect("rank 1"), id);
        (r0.join().expect("no panic"), again)
    });
    assert_eq!(again.expect("the restarted rank 2"), id);
    assert_eq!(r0.expect("rank 0 done"), id);
}

/// The answer is lost on the way (a proxy drops the rank's connection once, after rank 0 wrote
/// it), or the rank's acknowledgement comes 6 s late (past rank 0's 5 s for a connection): the
/// rank retries and is served; rank 0 counts it once it acknowledges, and the rank returns
/// the id only once counted.
#[test]
fn a_rank_whose_answer_was_lost_is_served_on_its_retry() {
    proxied(false);
}

#[test]
fn a_rank_whose_acknowledgement_came_late_is_served_on_its_retry() {
    proxied(true);
}

fn proxied(late_ack: bool) {
    let rank0_port = free_port();
    let proxy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let proxy_port = proxy.local_addr().expect("addr").port();
    let id = [0x77u8; 128];
    let (r0, r1) = std::thread::scope(|s| {
        let limit = Duration::from_secs(if late_ack { 12 } else { 5 });
        let r0 = s.spawn(move || rank(0, 2, rank0_port, limit).share(|| Ok(id)));
        let r1 = s.spawn(move || rank(1, 2, proxy_port, limit).share(|| Ok([0u8; 128])));
        proxy.set_nonblocking(true).expect("nonblocking");
        let mut lost_one = false;
        while !r1.is_finished() {
            let Some(mut t) = relay::next_turn(&proxy, rank0_port, Duration::from_secs(1)) else {
                continue;
            };
            if !lost_one && t.served() && !late_ack {
                lost_one = true;
                continue; // both connections dropped: the answer is lost
            }
            t.answer();
            if !t.served() {
                continue;
            }
            let Some(ack) = t.take_ack() else {
                continue;
            };
            if !lost_one && late_ack {
                lost_one = true;
                std::thread::sleep(Duration::from_secs(6));
            }
            if let Some(counted) = t.pass_ack(ack) {
                let _ = t.client.write_all(&counted);
            }
        }
        (r0.join().expect("no panic"), r1.join().expect("no panic"))
    });
    assert_eq!(r1.expect("rank 1, on its retry"), id);
    assert_eq!(r0.expect("rank 0, once rank 1 acknowledged"), id);
}

/// 64 clients that connect, say nothing and connect again at once do not keep a real rank out.
#[test]
fn sixty_four_silent_clients_that_reconnect_do_not_keep_a_rank_out() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let port = free_port();
    let limit = Duration::from_secs(12);
    let stop = AtomicBool::new(false);
    let (r0, r1) = std::thread::scope(|s| {
        let r0 = s.spawn(move || rank(0, 2, port, limit).share(|| Ok([8u8; 128])));
        drop(connect(port));
        for _ in 0..64 {
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    };
                    let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
                    let mut b = [0u8; 1];
                    // Until rank 0 drops it, then at once again.
                    loop {
                        match c.read(&mut b) {
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) && !stop.load(Ordering::Relaxed) => {}
                            _ => break,
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        let r1 = rank(1, 2, port, limit).share(|| Ok([0u8; 128]));
        let r0 = r0.join().expect("no panic");
        stop.store(true, Ordering::Relaxed);
        (r0, r1)
    });
    assert_eq!(
        r1.expect("rank 1 served beside the silent clients"),
        [8u8; 128]
    );
    assert_eq!(r0.expect("rank 0 done"), [8u8; 128]);
}

/// `MASTER_ADDR=[::1]`, a bracketed IPv6 loopback address, works where the host has IPv6.
#[test]
fn a_bracketed_ipv6_master_addr_works() {
    if TcpListener::bind("[::1]:0").is_err() {
        println!("no IPv6 loopback on this host: not checked");
        return;
    }
    let port = free_port();
    let got: Vec<Result<[u8; 128]>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| {
                s.spawn(move || {
                    Bootstrap::new(r, 2, r, "[::1]", port)
                        .expect("valid")
                        .timeout(Duration::from_secs(5))
                        .share(|| Ok([4u8; 128]))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    for g in got {
        assert_eq!(g.expect("served over [::1]"), [4u8; 128]);
    }
}

/// Every rank calls the bootstrap twice on one port (`Comm::from_env` twice, say), rank 2 late:
/// rank 1, done with the first exchange, asks for the second while rank 0 still serves the
/// first, and tries again until rank 0 begins it (it must not be refused as a duplicate).
#[test]
fn two_exchanges_on_one_port_give_every_rank_both_ids() {
    let port = free_port();
    let limit = Duration::from_secs(6);
    let got: Vec<Vec<[u8; 128]>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|r| {
                s.spawn(move || {
                    if r == 2 {
                        std::thread::sleep(Duration::from_millis(500));
                    }
                    (1..=2u8)
                        .map(|k| {
                            rank(r, 3, port, limit)
                                .share(|| Ok([k; 128]))
                                .expect("every exchange")
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    for ids in got {
        assert_eq!(ids, vec![[1u8; 128], [2u8; 128]]);
    }
}
