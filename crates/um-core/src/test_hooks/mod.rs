//! Counters and switches for `um`'s own tests, examples and benchmarks, behind the cargo
//! feature `test-hooks`, which only those enable (the workspace's dev-dependency on `um-core`).
//! Not part of the API: no program should enable the feature, and nothing here is covered by
//! semver.

use crate::driver;
use crate::driver::context::Context;
use crate::memory::storage::MirrorCopies;

pub use crate::reclaim::completion::use_event_thread_for_waits;
pub use crate::reclaim::reaper::{orphans_announced, orphans_pending};

/// How many `cuStreamAttachMemAsync` calls the calling thread has made: no redundant attach
/// reaches the driver.
pub fn attach_calls_on_this_thread() -> u64 {
    driver::attach_calls_on_this_thread()
}

/// How many times the calling thread has waited on the host for the device
/// (`cuStreamSynchronize`, `cuEventSynchronize`, `cuCtxSynchronize`): a loop whose buffers are
/// born and freed on a stream makes none.
pub fn host_waits_on_this_thread() -> u64 {
    driver::host_waits_on_this_thread()
}

/// How many CUDA events the calling thread has created: a stream's handoff event is made once
/// and reused.
pub fn events_created_on_this_thread() -> u64 {
    driver::events_created_on_this_thread()
}

/// How many of this thread's `cuStreamAttachMemAsync` calls attached to the host
/// (`CU_MEM_ATTACH_HOST`): the re-attach `sync` makes where the device lacks concurrent managed
/// access (or the context emulates that).
pub fn host_attach_calls_on_this_thread() -> u64 {
    driver::host_attach_calls_on_this_thread()
}

/// How many `cuMemPrefetchAsync` and `cuMemAdvise` calls the calling thread has made: the
/// `Transfer` policies' calls.
pub fn transfer_calls_on_this_thread() -> u64 {
    driver::transfer_calls_on_this_thread()
}

/// The host-to-device and device-to-host copies mirrored memory made and skipped on the
/// calling thread: no needless copy reaches the driver.
pub fn mirror_copies_on_this_thread() -> MirrorCopies {
    MirrorCopies::now()
}

/// What a device's count of captures holds at one moment (`driver/capture_count.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureCounts {
    /// Captures of `um` in progress on the device, on any thread.
    pub in_progress: usize,
    /// Captures of `um` waiting for the device's idle sections (and holds) to end.
    pub waiting: usize,
    /// Idle sections and holds (`Context::with_idle_unless_capturing`,
    /// `Context::with_captures_held_off`) in progress on the device.
    pub idle: usize,
}

/// The device's count of captures now: lets a test wait until another thread's capture waits
/// for a hold, rather than guess how long that takes.
pub fn capture_counts(ctx: &Context) -> CaptureCounts {
    let (in_progress, waiting, idle) = ctx.capture_counts();
    CaptureCounts {
        in_progress,
        waiting,
        idle,
    }
}
