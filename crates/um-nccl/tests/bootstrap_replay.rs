//! A relay that duplicates a rank's whole client stream (request and acknowledgement) on a late
//! second connection: an acknowledgement of one constant byte would let the copy be counted by
//! the next exchange rank 0 serves, which would return Ok while rank 1 never had its id. The
//! acknowledgement carries the id's hash. No GPU needed.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use um_nccl::Bootstrap;

mod common;
use common::free_port;

/// Relays one connection on `front` to `back`, recording what the client sent; once done,
/// replays those bytes on a fresh connection to `back` after `late` (a duplicated stream).
fn dup_relay(front: TcpListener, back: u16, late: Duration) {
    let (mut c, _) = front.accept().unwrap();
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", back)) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let mut sent = Vec::new();
    // request: 24 bytes
    let mut req = [0u8; 24];
    c.read_exact(&mut req).unwrap();
    sent.extend_from_slice(&req);
    s.write_all(&req).unwrap();
    let mut ans = [0u8; 9 + 128];
    s.read_exact(&mut ans).unwrap();
    c.write_all(&ans).unwrap();
    let mut ack = [0u8; 9];
    c.read_exact(&mut ack).unwrap();
    sent.extend_from_slice(&ack);
    s.write_all(&ack).unwrap();
    let mut counted = [0u8; 1];
    s.read_exact(&mut counted).unwrap();
    c.write_all(&counted).unwrap();
    drop((c, s));
    std::thread::sleep(late);
    // The duplicate: the same client bytes, on a new upstream connection.
    for _ in 0..200 {
        if let Ok(mut d) = TcpStream::connect(("127.0.0.1", back)) {
            let _ = d.write_all(&sent);
            let mut sink = [0u8; 256];
            let _ = d.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = d.read(&mut sink);
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_duplicated_stream_counts_rank_1_in_an_exchange_it_never_joined() {
    let port = free_port();
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let fport = front.local_addr().unwrap().port();
    let limit = Duration::from_secs(8);
    let (r0, r1_first, r1_second) = std::thread::scope(|s| {
        let relay = s.spawn(move || dup_relay(front, port, Duration::from_millis(200)));
        let r0 = s.spawn(move || {
            let b = Bootstrap::new(0, 2, 0, "127.0.0.1", port)
                .unwrap()
                .timeout(limit);
            let a = b.share(|| Ok([0xAA; 128]));
            let t = Instant::now();
            let bb = b.share(|| Ok([0xBB; 128]));
            (a, bb, t.elapsed())
        });
        // rank 1, exchange 1 through the duplicating relay
        let one = Bootstrap::new(1, 2, 1, "127.0.0.1", fport)
            .unwrap()
            .timeout(limit)
            .share(|| unreachable!());
        relay.join().unwrap();
        // rank 1 is slow to its second bootstrap (e.g. building its first communicator)
        std::thread::sleep(Duration::from_millis(1500));
        let t = Instant::now();
        let two = Bootstrap::new(1, 2, 1, "127.0.0.1", port)
            .unwrap()
            .timeout(Duration::from_secs(3))
            .share(|| unreachable!());
        (r0.join().unwrap(), one, (two, t.elapsed()))
    });
    eprintln!("rank0 ex1 = {:?}", r0.0.as_ref().map(|v| v[0]));
    eprintln!(
        "rank0 ex2 = {:?} after {:?}",
        r0.1.as_ref().map(|v| v[0]),
        r0.2
    );
    eprintln!("rank1 ex1 = {:?}", r1_first.as_ref().map(|v| v[0]));
    eprintln!(
        "rank1 ex2 = {:?} after {:?}",
        r1_second.0.as_ref().map(|v| v[0]),
        r1_second.1
    );
    assert_eq!(r1_first.unwrap()[0], 0xAA);
    // The break: rank 0's exchange 2 returned Ok though rank 1 never received 0xBB.
    assert!(
        !(r0.1.is_ok() && r1_second.0.is_err()),
        "rank 0 returned Ok from exchange 2 while rank 1 never got its id"
    );
}
