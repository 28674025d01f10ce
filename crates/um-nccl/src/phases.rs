//! Where a grouped launch spends its host time: the time-stamp counter read at the boundaries
//! of [`Group`](crate::Group)'s phases, summed per phase over the calling thread's current step.
//! A measurement aid for `bench/nccl_probe --poll` (issue 22's host-time goal), compiled only
//! with the `phase-timing` feature; without it every [`lap`] is empty and this module is
//! private. Nothing here touches NCCL, CUDA or a buffer: it reads a counter and writes
//! thread-local cells.

/// The phases [`lap`] is called at the end of, by index: what [`take`] returns, in order.
#[cfg(feature = "phase-timing")]
pub const NAMES: [&str; 11] = [
    "calls built and checked (Group::new, each call's method)",
    "refusal inside a stream callback",
    "communicators live, one mode",
    "agreement ledger",
    "streams remembered for poisoning",
    "communicators of the group, once",
    "ncclGroupStart",
    "NCCL's calls issued",
    "ncclGroupEnd",
    "poll of nonblocking communicators",
    "after launch (the caller's lap)",
];

#[cfg(feature = "phase-timing")]
mod imp {
    use std::cell::Cell;

    thread_local! {
        static LAST: Cell<u64> = const { Cell::new(0) };
        static CUR: [Cell<u64>; 16] = const { [const { Cell::new(0) }; 16] };
    }

    /// The time-stamp counter (elsewhere than x86-64: nanoseconds since the first read).
    #[inline(always)]
    pub fn tsc() -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `rdtsc` reads a counter; it has no preconditions and touches no memory.
        let t = unsafe { core::arch::x86_64::_rdtsc() };
        #[cfg(not(target_arch = "x86_64"))]
        let t = {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            u64::try_from(
                START
                    .get_or_init(std::time::Instant::now)
                    .elapsed()
                    .as_nanos(),
            )
            .unwrap_or(u64::MAX)
        };
        t
    }

    /// Starts a step: every phase's sum is zero, the clock starts now.
    #[inline(always)]
    pub fn reset() {
        CUR.with(|c| c.iter().for_each(|x| x.set(0)));
        LAST.with(|l| l.set(tsc()));
    }

    /// Adds the ticks since the last lap (or [`reset`]) to phase `i`; nothing if `i` is 16 or
    /// more.
    #[inline(always)]
    pub fn lap(i: usize) {
        let now = tsc();
        let last = LAST.with(|l| l.replace(now));
        CUR.with(|c| {
            if let Some(x) = c.get(i) {
                x.set(x.get() + now.wrapping_sub(last));
            }
        });
    }

    /// The step's ticks per phase: 16 slots, [`NAMES`](super::NAMES)'s first, then any the
    /// caller laps.
    pub fn take() -> [u64; 16] {
        CUR.with(|c| std::array::from_fn(|i| c[i].get()))
    }
}

#[cfg(feature = "phase-timing")]
pub use imp::*;

/// Without the feature: nothing.
#[cfg(not(feature = "phase-timing"))]
#[inline(always)]
pub(crate) fn lap(_: usize) {}

#[cfg(all(test, feature = "phase-timing"))]
mod tests {
    use super::*;

    #[test]
    fn laps_add_to_their_phase_and_reset_clears_them() {
        reset();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_micros(50) {
            std::hint::spin_loop();
        }
        lap(3);
        lap(16); // out of range: ignored
        let first = take();
        assert!(first[3] > 0, "50 µs of work gave phase 3 no ticks");
        assert!(first.iter().enumerate().all(|(i, t)| i == 3 || *t == 0));
        lap(3);
        assert!(take()[3] >= first[3], "a second lap took ticks away");
        reset();
        assert_eq!(take(), [0; 16]);
    }
}
