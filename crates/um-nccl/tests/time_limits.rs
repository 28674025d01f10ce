//! A time limit of `Duration::MAX` is a wait without end, not a panic: a fresh red-team
//! reviewer of the poll clock found `Launched::wait(Duration::MAX)` panicking with an `Instant`
//! overflow (`now + limit`), as did `Bootstrap::timeout(Duration::MAX)` (now
//! `bootstrap_peers.rs`), communicator creation and `Comm::wait` (those need a GPU:
//! `tests/gpu_nccl.rs`). No GPU or NCCL is needed here.
#![allow(clippy::expect_used)]

use std::time::Duration;

use um_nccl::Group;

#[test]
fn an_empty_group_waits_with_an_endless_limit() {
    let launched = Group::new().launch().expect("an empty group launches");
    launched.wait(Duration::MAX).expect("nothing to wait for");
}
