//! The real NCCL library, where one is installed (`UM_NCCL_LIB`, or `libnccl.so.2` on the
//! loader's path): its entry points load, its version is read, and rank 0's `ncclGetUniqueId`
//! reaches every rank through the bootstrap over loopback. No GPU is needed. Without NCCL the
//! test checks the error instead, and says so.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use um_nccl::{Bootstrap, MIN_VERSION, UniqueId};

mod common;
use common::free_port;

#[test]
fn the_installed_nccl_loads_and_its_unique_id_reaches_every_rank() {
    let nccl = match um_nccl::nccl() {
        Ok(n) => n,
        Err(e) => {
            assert!(e.to_string().contains("install NCCL"), "{e}");
            println!("no NCCL on this machine ({e}): only the error was checked");
            return;
        }
    };
    println!("NCCL {:?} from {}", nccl.version(), nccl.path());
    assert!(nccl.version() >= MIN_VERSION);
    let a = UniqueId::new().expect("ncclGetUniqueId");
    let b = UniqueId::new().expect("ncclGetUniqueId");
    assert_ne!(a, b, "two ids name two bootstrap endpoints");
    let port = free_port();
    let ids: Vec<UniqueId> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|rank| {
                s.spawn(move || {
                    Bootstrap::new(rank, 3, rank, "localhost", port)
                        .expect("bootstrap")
                        .timeout(Duration::from_secs(30))
                        .unique_id()
                        .expect("the id")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
}
