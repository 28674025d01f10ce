//! Where a grouped launch spends its host time: the time-stamp counter read at the boundaries
//! of [`Group`](crate::Group)'s phases (in its call methods and in `launch`), summed per phase
//! over the calling thread's current step. A measurement aid for `bench/nccl_probe --poll`,
//! compiled only with the `phase-timing` feature; without it every
//! [`lap`] is empty and this module is private. Nothing here touches NCCL, CUDA or a buffer: it reads a counter and writes
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
        // SAFETY: `rdtsc` reads a counter and touches no memory. (Where the OS makes it fault,
        // `prctl(PR_SET_TSC, PR_TSC_SIGSEGV)` or seccomp, the process gets SIGSEGV.)
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

    // Every access is `try_with`: a launch may run in a thread-local destructor. These cells
    // have no destructor, so on Linux they are never gone; where a target destroys them all
    // the same, nothing is counted instead of a panic.

    /// Starts a step: every phase's sum is zero, the clock starts now.
    #[inline(always)]
    pub fn reset() {
        let _ = CUR.try_with(|c| c.iter().for_each(|x| x.set(0)));
        let _ = LAST.try_with(|l| l.set(tsc()));
    }

    /// Adds the ticks since the last lap (or [`reset`]) to phase `i`, wrapping (a counter that
    /// steps back, on another core, adds a huge value instead of panicking); if `i` is 16 or
    /// more the interval is dropped. One lap costs about 9 ns (an `rdtsc` and two cells).
    #[inline(always)]
    pub fn lap(i: usize) {
        let now = tsc();
        let Ok(last) = LAST.try_with(|l| l.replace(now)) else {
            return;
        };
        let _ = CUR.try_with(|c| {
            if let Some(x) = c.get(i) {
                add_ticks(x, now, last);
            }
        });
    }

    /// `now - last` added to `x`, both wrapping: never a panic, whatever the counter did.
    #[inline(always)]
    pub(super) fn add_ticks(x: &Cell<u64>, now: u64, last: u64) {
        x.set(x.get().wrapping_add(now.wrapping_sub(last)));
    }

    /// The step's ticks per phase: 16 slots, [`NAMES`](super::NAMES)'s first, then any the
    /// caller laps (zeros in a thread-local destructor, once the counters are gone).
    pub fn take() -> [u64; 16] {
        CUR.try_with(|c| std::array::from_fn(|i| c[i].get()))
            .unwrap_or([0; 16])
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

    #[test]
    fn a_counter_that_steps_back_wraps_instead_of_panicking() {
        // Tests build with overflow checks: a plain `+` or `-` would panic here.
        let x = std::cell::Cell::new(5);
        imp::add_ticks(&x, 100, 150);
        assert_eq!(x.get(), 5u64.wrapping_sub(50));
        imp::add_ticks(&x, 200, 100);
        assert_eq!(x.get(), 55);
    }
}
