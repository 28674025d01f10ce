//! A relay between a rank and rank 0 for the bootstrap tests: it forwards one protocol turn at
//! a time, so that a test can lose, delay or hold any word of it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// One connection taken on the relay's listener and joined to rank 0, the rank's request
/// forwarded and rank 0's answer read (not yet passed on).
pub(crate) struct Turn {
    pub(crate) client: TcpStream,
    pub(crate) up: TcpStream,
    head: [u8; 9],
    rest: Vec<u8>,
}

/// The next connection on `front` (a nonblocking listener) relayed to rank 0 on `back`, or
/// `None` where there is none yet (after 5 ms) or a step failed.
pub(crate) fn next_turn(front: &TcpListener, back: u16, read_limit: Duration) -> Option<Turn> {
    let Ok((mut client, _)) = front.accept() else {
        std::thread::sleep(Duration::from_millis(5));
        return None;
    };
    client.set_nonblocking(false).ok()?;
    client.set_read_timeout(Some(read_limit)).ok()?;
    let mut up = TcpStream::connect(("127.0.0.1", back)).ok()?;
    up.set_read_timeout(Some(read_limit)).ok()?;
    let mut req = [0u8; 24];
    let mut head = [0u8; 9];
    client.read_exact(&mut req).ok()?;
    up.write_all(&req).ok()?;
    up.read_exact(&mut head).ok()?;
    let mut rest = vec![0u8; if head[8] == 0 { 128 } else { 0 }];
    up.read_exact(&mut rest).ok()?;
    Some(Turn {
        client,
        up,
        head,
        rest,
    })
}

impl Turn {
    /// Whether rank 0 answered with the id.
    pub(crate) fn served(&self) -> bool {
        self.head[8] == 0
    }

    /// Passes rank 0's answer on to the rank.
    pub(crate) fn answer(&mut self) {
        let _ = self.client.write_all(&self.head);
        let _ = self.client.write_all(&self.rest);
    }

    /// The rank's acknowledgement of the id (not yet passed on).
    pub(crate) fn take_ack(&mut self) -> Option<[u8; 9]> {
        let mut ack = [0u8; 9];
        self.client.read_exact(&mut ack).ok().map(|()| ack)
    }

    /// A served turn up to rank 0's last word: the answer passed on, the rank's acknowledgement
    /// passed back; that last word (not yet passed on), or `None` where rank 0 did not serve
    /// the rank or a step failed.
    #[allow(dead_code)] // bootstrap_peers.rs holds the acknowledgement back itself
    pub(crate) fn relay_to_last_word(&mut self) -> Option<[u8; 1]> {
        self.answer();
        if !self.served() {
            return None;
        }
        let ack = self.take_ack()?;
        self.pass_ack(ack)
    }

    /// Passes the acknowledgement on to rank 0; its last word (not yet passed on).
    pub(crate) fn pass_ack(&mut self, ack: [u8; 9]) -> Option<[u8; 1]> {
        let mut counted = [0u8; 1];
        self.up.write_all(&ack).ok()?;
        self.up.read_exact(&mut counted).ok().map(|()| counted)
    }
}
