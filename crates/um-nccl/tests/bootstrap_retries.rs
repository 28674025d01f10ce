//! The bootstrap after non-hostile failures (a rank 0 that timed out, a lost last word, a
//! stalled connection, another spelling of MASTER_ADDR), followed by retries or later exchanges
//! on the same port. Exchange numbers kept per process break every one of them (the processes'
//! counts drift apart): rank 0 keeps nothing from one exchange to the next, and a rank tries a
//! fresh connection after 6 s on one. No GPU or NCCL is needed.
#![allow(clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use um_core::Result;
use um_nccl::Bootstrap;

mod common;
mod relay;
mod timing;
use common::free_port;
use timing::{Got, timed};

fn boot(r: usize, world: usize, addr: &str, port: u16, limit: Duration) -> Bootstrap {
    Bootstrap::new(r, world, r, addr, port)
        .expect("valid")
        .timeout(limit)
}

/// World 3. Exchange 1: rank 2 is late (dies and is relaunched, say), so rank 0 times out
/// (Err) although rank 1 was counted and returned Ok. Every process then tries the bootstrap
/// again: every rank must get the id of the retry (with exchange numbers, rank 1 was one
/// ahead of rank 0 and told to wait until its limit).
#[test]
fn a_retry_after_rank_0_timed_out_while_rank_1_returned_succeeds() {
    let port = free_port();
    let limit = Duration::from_secs(2);
    let (r0, r1) = std::thread::scope(|s| {
        let r0 =
            s.spawn(move || timed(|| boot(0, 3, "127.0.0.1", port, limit).share(|| Ok([1; 128]))));
        let r1 =
            s.spawn(move || timed(|| boot(1, 3, "127.0.0.1", port, limit).share(|| Ok([0; 128]))));
        (r0.join().expect("no panic"), r1.join().expect("no panic"))
    });
    eprintln!(
        "exchange 1: rank 0 {:?} in {:?}, rank 1 ok={} in {:?}",
        r0.0.as_ref().err().map(|e| e.to_string()),
        r0.1,
        r1.0.is_ok(),
        r1.1
    );
    assert!(r0.0.is_err(), "rank 2 never came");
    assert_eq!(r1.0.expect("rank 1 counted"), [1; 128]);
    // Everybody retries, rank 2 included.
    let limit = Duration::from_secs(3);
    let got: Vec<Got> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                s.spawn(move || {
                    timed(|| boot(r, 3, "127.0.0.1", port, limit).share(|| Ok([2; 128])))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    for (r, (res, t)) in got.iter().enumerate() {
        eprintln!(
            "retry: rank {r}: {:?} in {t:?}",
            res.as_ref().map(|b| b[0]).map_err(|e| e.to_string())
        );
    }
    for (r, (res, _)) in got.into_iter().enumerate() {
        assert_eq!(
            res.unwrap_or_else(|e| panic!("rank {r} on the retry: {e}")),
            [2; 128]
        );
    }
}

/// A relay in front of rank 0 that forwards whole protocol turns. `lose_counted`: on the first
/// served connection, the rank's acknowledgement reaches rank 0 but rank 0's last word
/// (COUNTED) is lost and the connection reset (the documented split). `stall_first`: the
/// first connection's answer never arrives and the connection stays open (a black-holed path,
/// a lost NAT entry), later connections are relayed.
fn relay(
    front: TcpListener,
    back: u16,
    lose_counted: bool,
    stall_first: bool,
    stop: Arc<AtomicBool>,
) {
    front.set_nonblocking(true).expect("nonblocking");
    let mut first = true;
    let mut held = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let Some(mut t) = relay::next_turn(&front, back, Duration::from_secs(2)) else {
            continue;
        };
        if stall_first && first && t.served() {
            first = false;
            held.push(t); // never answered, never closed
            continue;
        }
        let Some(counted) = t.relay_to_last_word() else {
            continue;
        };
        if lose_counted && first {
            first = false;
            continue; // both dropped: the last word is lost
        }
        let _ = t.client.write_all(&counted);
    }
}

/// The documented split (rank 0 counted rank 1, its word lost: rank 0 Ok, rank 1 Err) is one
/// failed exchange. The next exchange on the same port, over a healthy path, must work (with
/// exchange numbers, rank 1 was one behind and refused for good).
#[test]
fn after_the_documented_split_the_next_exchange_works() {
    let rank0_port = free_port();
    let front = TcpListener::bind("127.0.0.1:0").expect("bind");
    let front_port = front.local_addr().expect("addr").port();
    let stop = Arc::new(AtomicBool::new(false));
    let limit = Duration::from_secs(3);
    let (e1, e2) = std::thread::scope(|s| {
        let st = Arc::clone(&stop);
        s.spawn(move || relay(front, rank0_port, true, false, st));
        let ex = |k: u8| {
            let r0 = s.spawn(move || {
                timed(|| boot(0, 2, "127.0.0.1", rank0_port, limit).share(|| Ok([k; 128])))
            });
            let r1 = s.spawn(move || {
                timed(|| boot(1, 2, "127.0.0.1", front_port, limit).share(|| Ok([0; 128])))
            });
            (r0.join().expect("no panic"), r1.join().expect("no panic"))
        };
        let e1 = ex(1);
        let e2 = ex(2);
        stop.store(true, Ordering::Release);
        (e1, e2)
    });
    let show = |g: &Got| {
        format!(
            "{:?} in {:?}",
            g.0.as_ref().map(|b| b[0]).map_err(|e| e.to_string()),
            g.1
        )
    };
    eprintln!("exchange 1: rank 0 {}; rank 1 {}", show(&e1.0), show(&e1.1));
    eprintln!("exchange 2: rank 0 {}; rank 1 {}", show(&e2.0), show(&e2.1));
    assert!(
        e1.0.0.is_ok() && e1.1.0.is_err(),
        "exchange 1 is the documented split"
    );
    assert_eq!(e2.1.0.expect("rank 1, exchange 2"), [2; 128]);
    assert_eq!(e2.0.0.expect("rank 0, exchange 2"), [2; 128]);
}

/// A connection whose answer never arrives (a black-holed path) while rank 0 keeps serving:
/// rank 0 gives up on that connection after 5 s, but the rank waits on it until its whole
/// limit instead of trying a fresh connection, which would be served.
#[test]
fn a_stalled_connection_does_not_keep_a_rank_out_for_its_whole_limit() {
    let rank0_port = free_port();
    let front = TcpListener::bind("127.0.0.1:0").expect("bind");
    let front_port = front.local_addr().expect("addr").port();
    let stop = Arc::new(AtomicBool::new(false));
    let limit = Duration::from_secs(15);
    let (r0, r1) = std::thread::scope(|s| {
        let st = Arc::clone(&stop);
        s.spawn(move || relay(front, rank0_port, false, true, st));
        let r0 = s.spawn(move || {
            timed(|| boot(0, 2, "127.0.0.1", rank0_port, limit).share(|| Ok([9; 128])))
        });
        let r1 = s.spawn(move || {
            timed(|| boot(1, 2, "127.0.0.1", front_port, limit).share(|| Ok([0; 128])))
        });
        let out = (r0.join().expect("no panic"), r1.join().expect("no panic"));
        stop.store(true, Ordering::Release);
        out
    });
    let show = |g: &Got| {
        format!(
            "{:?} in {:?}",
            g.0.as_ref().map(|b| b[0]).map_err(|e| e.to_string()),
            g.1
        )
    };
    eprintln!("rank 0 {}; rank 1 {}", show(&r0), show(&r1));
    assert_eq!(r1.0.expect("rank 1 served on a fresh connection"), [9; 128]);
    assert_eq!(r0.0.expect("rank 0"), [9; 128]);
}

/// One program, two exchanges on one port; rank 0 spells MASTER_ADDR `127.1` the second time
/// (the same address, which it binds alike): both exchanges must work (exchange numbers kept
/// per spelling broke this).
#[test]
fn another_spelling_of_master_addr_on_rank_0_still_meets_the_ranks() {
    spelling(0);
}

/// As above, rank 1 respells it.
#[test]
fn another_spelling_of_master_addr_on_a_rank_still_meets_rank_0() {
    spelling(1);
}

fn spelling(respelled: usize) {
    let port = free_port();
    let limit = Duration::from_secs(3);
    let run = |k: u8, addr_of: &(dyn Fn(usize) -> &'static str + Sync)| -> Vec<Got> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|r| {
                    let addr = addr_of(r);
                    s.spawn(move || timed(|| boot(r, 2, addr, port, limit).share(|| Ok([k; 128]))))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect()
        })
    };
    let first = run(1, &|_| "127.0.0.1");
    for g in &first {
        assert_eq!(*g.0.as_ref().expect("exchange 1"), [1; 128]);
    }
    let second = run(2, &move |r| {
        if r == respelled { "127.1" } else { "127.0.0.1" }
    });
    for (r, g) in second.iter().enumerate() {
        eprintln!(
            "exchange 2: rank {r}: {:?} in {:?}",
            g.0.as_ref().map(|b| b[0]).map_err(|e| e.to_string()),
            g.1
        );
    }
    for (r, g) in second.into_iter().enumerate() {
        assert_eq!(
            g.0.unwrap_or_else(|e| panic!("rank {r}, exchange 2: {e}")),
            [2; 128]
        );
    }
}

/// Limits at the ends of Duration: no panic, and a zero limit errs at once on both sides.
#[test]
fn zero_and_huge_limits_do_not_panic() {
    let port = free_port();
    let t0 = Instant::now();
    assert!(
        boot(0, 2, "127.0.0.1", port, Duration::ZERO)
            .share(|| Ok([1; 128]))
            .is_err()
    );
    assert!(
        boot(1, 2, "127.0.0.1", port, Duration::ZERO)
            .share(|| Ok([1; 128]))
            .is_err()
    );
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let port = free_port();
    let huge = Duration::from_secs(u64::MAX / 1000);
    let got: Vec<Result<[u8; 128]>> = std::thread::scope(|s| {
        let hs: Vec<_> = [
            (0, Duration::MAX),
            (1, huge),
            (2, Duration::new(u64::MAX, 999_999_999)),
        ]
        .into_iter()
        .map(|(r, l)| s.spawn(move || boot(r, 3, "127.0.0.1", port, l).share(|| Ok([5; 128]))))
        .collect();
        hs.into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    for g in got {
        assert_eq!(g.expect("huge limits"), [5; 128]);
    }
}

/// A copy of rank 1's request (a second process with RANK=1 that never goes on, or a
/// duplicated stream) reaches rank 0 first and then stays silent: rank 0 holds rank 1's place
/// for that connection, and answers the real rank 1 "busy" until it drops the copy, at most 5 s
/// after it connected. The real rank, retrying, is then served, well within its limit.
#[test]
fn a_silent_copy_of_a_request_keeps_the_rank_out_for_at_most_one_connection() {
    use std::io::Read;
    use std::net::TcpStream;
    let port = free_port();
    let limit = Duration::from_secs(30);
    // The request's bytes, from a throwaway rank 1 that talks to a listener of the test's.
    let catcher = TcpListener::bind("127.0.0.1:0").expect("bind");
    let catcher_port = catcher.local_addr().expect("addr").port();
    let request = std::thread::scope(|s| {
        let caught = s.spawn(move || {
            let (mut c, _) = catcher.accept().expect("the throwaway rank connects");
            let mut req = [0u8; 24];
            c.read_exact(&mut req).expect("a request");
            req
        });
        let _ = boot(1, 2, "127.0.0.1", catcher_port, Duration::from_secs(1))
            .share(|| panic!("rank 1 makes no id"));
        caught.join().expect("no panic")
    });
    let (r0, r1, held) = std::thread::scope(|s| {
        let r0 =
            s.spawn(move || timed(|| boot(0, 2, "127.0.0.1", port, limit).share(|| Ok([7; 128]))));
        // The copy: connects, sends the request, reads rank 0's answer (so rank 0 holds rank 1's
        // place now), and says nothing more.
        let mut copy = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(c) => break c,
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        copy.write_all(&request).expect("the copy's request");
        let mut answer = [0u8; 9 + 128];
        copy.read_exact(&mut answer)
            .expect("rank 0 answers the copy");
        assert_eq!(answer[8], 0, "the copy is served first (status OK)");
        let held = Instant::now();
        let r1 =
            timed(|| boot(1, 2, "127.0.0.1", port, limit).share(|| panic!("rank 1 makes no id")));
        let out = (r0.join().expect("no panic"), r1, held.elapsed());
        drop(copy);
        out
    });
    eprintln!(
        "rank 1 served {:?} after the copy was answered; rank 0 returned after {:?}",
        held, r0.1
    );
    assert_eq!(
        r1.0.expect("the real rank 1 is served once the copy is dropped"),
        [7; 128]
    );
    assert_eq!(r0.0.expect("rank 0"), [7; 128]);
    // 5 s on rank 0's connection to the copy, then a retry of the rank's every 50 ms: 10 s
    // leaves room for a loaded machine, and is a third of the rank's limit.
    assert!(
        r1.1 < Duration::from_secs(10),
        "rank 1 kept out for {:?}",
        r1.1
    );
}
