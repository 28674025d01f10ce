//! Helpers shared by the integration tests of `um-nccl`.

use std::net::TcpListener;

/// A loopback port that was free a moment ago.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
