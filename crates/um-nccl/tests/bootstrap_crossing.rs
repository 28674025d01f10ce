//! Exchanges that cross on one port: with no exchange identity on the wire, a rank still inside
//! exchange 1 (its count's confirmation lost or late) could be served by rank 0's exchange 2 and
//! return exchange 2's id as exchange 1's. A rank keeps the id it received within one call and
//! takes no other. No GPU or NCCL is needed.
#![allow(clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use um_nccl::Bootstrap;

mod common;
mod relay;
mod timing;
use common::free_port;
use timing::{Got, timed};

fn boot(r: usize, world: usize, port: u16, limit: Duration) -> Bootstrap {
    Bootstrap::new(r, world, r, "127.0.0.1", port)
        .expect("valid")
        .timeout(limit)
}

fn show(g: &Got) -> String {
    format!(
        "{:?} in {:?}",
        g.0.as_ref().map(|b| b[0]).map_err(|e| e.to_string()),
        g.1
    )
}

#[derive(Clone, Copy)]
enum LastWord {
    /// Rank 0's COUNTED on the first served connection is lost, the connection reset (the
    /// documented split).
    Lost,
    /// Rank 0's COUNTED on the first served connection arrives `d` late (a congested path);
    /// nothing is lost.
    Late(Duration),
}

/// A relay in front of rank 0 forwarding whole protocol turns; on the first served
/// connection the last word is lost or late.
fn relay(front: TcpListener, back: u16, word: LastWord, stop: Arc<AtomicBool>) {
    front.set_nonblocking(true).expect("nonblocking");
    let mut first = true;
    while !stop.load(Ordering::Acquire) {
        let Some(mut t) = relay::next_turn(&front, back, Duration::from_secs(2)) else {
            continue;
        };
        let Some(counted) = t.relay_to_last_word() else {
            continue;
        };
        let relay::Turn {
            client: mut c, up, ..
        } = t;
        if first {
            first = false;
            match word {
                LastWord::Lost => continue, // both dropped
                LastWord::Late(d) => {
                    // Delivered late on its own thread; the relay goes on serving.
                    std::thread::spawn(move || {
                        std::thread::sleep(d);
                        let _ = c.write_all(&counted);
                        drop(up);
                    });
                    continue;
                }
            }
        }
        let _ = c.write_all(&counted);
    }
}

/// One program, world 2, bootstraps twice on one port (two communicators), every rank calling
/// `share` twice back to back. Rank 1 reaches rank 0 through `word`'s path. Returns
/// (rank 0's two results, rank 1's two results).
fn two_back_to_back(word: LastWord, limit: Duration) -> ([Got; 2], [Got; 2]) {
    let rank0_port = free_port();
    let front = TcpListener::bind("127.0.0.1:0").expect("bind");
    let front_port = front.local_addr().expect("addr").port();
    let stop = Arc::new(AtomicBool::new(false));
    let got = std::thread::scope(|s| {
        let st = Arc::clone(&stop);
        s.spawn(move || relay(front, rank0_port, word, st));
        let r0 = s.spawn(move || {
            let a = timed(|| boot(0, 2, rank0_port, limit).share(|| Ok([1; 128])));
            let b = timed(|| boot(0, 2, rank0_port, limit).share(|| Ok([2; 128])));
            [a, b]
        });
        let r1 = s.spawn(move || {
            let a = timed(|| boot(1, 2, front_port, limit).share(|| Ok([0; 128])));
            let b = timed(|| boot(1, 2, front_port, limit).share(|| Ok([0; 128])));
            [a, b]
        });
        let got = (r0.join().expect("no panic"), r1.join().expect("no panic"));
        stop.store(true, Ordering::Release);
        got
    });
    for (who, g) in [("rank 0", &got.0), ("rank 1", &got.1)] {
        eprintln!(
            "{who}: exchange 1 {}; exchange 2 {}",
            show(&g[0]),
            show(&g[1])
        );
    }
    got
}

/// The documented split (rank 0 counted rank 1, its last word lost) must end with rank 1 in an
/// error: rank 0 goes on to the program's next exchange at once, and rank 1's retry is served
/// by exchange 2, whose id rank 1 must not return from its exchange-1 call.
#[test]
fn after_a_lost_last_word_rank_1_never_returns_the_next_exchange_s_id() {
    let (_r0, r1) = two_back_to_back(LastWord::Lost, Duration::from_secs(4));
    if let Ok(id) = &r1[0].0 {
        assert_eq!(
            id[0], 1,
            "rank 1's exchange-1 call returned exchange 2's id ({})",
            id[0]
        );
    }
}

/// No loss at all: rank 0's last word on rank 1's exchange-1 connection arrives 7 s late
/// (past the rank's 6 s per connection). Rank 1 tries a fresh connection, which rank 0's
/// exchange 2 serves: it must not return that id from its exchange-1 call.
#[test]
fn a_late_last_word_never_gives_rank_1_the_next_exchange_s_id() {
    let (_r0, r1) = two_back_to_back(
        LastWord::Late(Duration::from_secs(7)),
        Duration::from_secs(12),
    );
    if let Ok(id) = &r1[0].0 {
        assert_eq!(
            id[0], 1,
            "rank 1's exchange-1 call returned exchange 2's id ({})",
            id[0]
        );
    }
}
