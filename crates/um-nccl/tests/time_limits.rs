//! A time limit of `Duration::MAX` is a wait without end, not a panic: a fresh red-team
//! reviewer of the poll clock found `Bootstrap::timeout(Duration::MAX)` and
//! `Launched::wait(Duration::MAX)` panicking with an `Instant` overflow (`now + limit`), as did
//! communicator creation and `Comm::wait` (those need a GPU: `tests/gpu_nccl.rs`). No GPU or
//! NCCL is needed here.
#![allow(clippy::expect_used)]

use std::net::TcpListener;
use std::time::Duration;

use um_nccl::{Bootstrap, Group};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

#[test]
fn a_bootstrap_with_an_endless_limit_shares_the_id() {
    let port = free_port();
    let got: Vec<[u8; 128]> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                s.spawn(move || {
                    Bootstrap::new(rank, 2, rank, "127.0.0.1", port)
                        .expect("bootstrap")
                        .timeout(Duration::MAX)
                        .share(|| Ok([7u8; 128]))
                        .expect("the id")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    assert!(got.iter().all(|id| *id == [7u8; 128]));
}

#[test]
fn an_empty_group_waits_with_an_endless_limit() {
    let launched = Group::new().launch().expect("an empty group launches");
    launched.wait(Duration::MAX).expect("nothing to wait for");
}
