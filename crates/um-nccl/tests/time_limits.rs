//! A time limit of `Duration::MAX` is a wait without end, not a panic: `now + limit` overflows
//! `Instant`, for `Launched::wait(Duration::MAX)` here, as for `Bootstrap::timeout`
//! (`bootstrap_peers.rs`), communicator creation and `Comm::wait` (those need a GPU:
//! `tests/gpu_devices/gpu_nccl.rs`). No GPU or NCCL is needed here.
#![allow(clippy::expect_used)]

use std::time::Duration;

use um_nccl::Group;

#[test]
fn an_empty_group_waits_with_an_endless_limit() {
    let launched = Group::new().launch().expect("an empty group launches");
    launched.wait(Duration::MAX).expect("nothing to wait for");
}
