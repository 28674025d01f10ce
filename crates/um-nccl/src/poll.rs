//! How um-nccl waits for NCCL and the GPU: poll loops that spin, then yield, then sleep, by the
//! time waited, and give up at a time limit.

use std::time::{Duration, Instant};

/// How a poll loop waits between polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    Spin,
    Yield,
    Sleep,
}

impl Pause {
    fn take(self) {
        match self {
            Pause::Spin => std::hint::spin_loop(),
            Pause::Yield => std::thread::yield_now(),
            Pause::Sleep => std::thread::sleep(Duration::from_micros(50)),
        }
    }
}

/// Spinning lasts this long from the first poll. By time, not by count: NCCL's launch thread
/// takes 45 to 60 µs per nonblocking collective on an H200 (`um_bench`, 2x H200, 2026-11-23),
/// and the 256 polls that the spin used to last could end before that, so a step's wait ended
/// in `sched_yield` calls. um's host time per step was then +1.34 µs over the raw call (median
/// step, 95% CI +1.11 .. +1.51) on nonblocking communicators, against +0.53 on blocking ones.
const SPIN_FOR: Duration = Duration::from_micros(250);
/// Yielding lasts until this long from the first poll; then a poll every 50 µs.
const YIELD_UNTIL: Duration = Duration::from_millis(2);

fn pause_after(waited: Duration) -> Pause {
    if waited < SPIN_FOR {
        Pause::Spin
    } else if waited < YIELD_UNTIL {
        Pause::Yield
    } else {
        Pause::Sleep
    }
}

/// Spins, then yields, then sleeps, by the time since the first poll: waits for NCCL's launch
/// thread or the GPU with little latency and without burning a core for long.
pub(crate) struct Backoff {
    start: Instant,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff {
            start: Instant::now(),
        }
    }

    pub(crate) fn wait(&self) {
        pause_after(self.start.elapsed()).take();
    }
}

/// When a wait ends: a time limit from now, or never where now plus the limit is past what
/// `Instant` holds (`Duration::MAX`, say: a wait that long is asked to be endless, and an
/// `Instant` sum that overflows would panic).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(Option<Instant>);

impl Deadline {
    pub(crate) fn after(limit: Duration) -> Deadline {
        Deadline(Instant::now().checked_add(limit))
    }

    /// Whether the deadline has passed.
    pub(crate) fn passed(&self) -> bool {
        self.0.is_some_and(|d| Instant::now() >= d)
    }

    /// The time left (`Duration::MAX` for a wait without end).
    pub(crate) fn left(&self) -> Duration {
        self.0.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        })
    }
}

/// While a poll loop spins, the clock is read once every this many polls.
const POLLS_PER_READ: u32 = 16;

/// What a [`PollClock`] says after a poll that found NCCL still busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Poll again at once (the clock was not read).
    Poll,
    /// Pause so, then poll again.
    After(Pause),
    /// The time limit is past.
    GiveUp,
}

/// The clock of the poll after a call on nonblocking communicators (until NCCL's launch thread
/// is done with it: [`Group::launch`](crate::Group::launch), a [`Comm`](crate::Comm) method,
/// the flush at drop): [`Backoff`] and a time limit in one, for the polls of one call on every
/// communicator it reaches. The wait usually lasts tens of µs and spins all along, and a poll is
/// a few ns (`ncclCommGetAsyncError` reads the communicator's state): while it spins the clock
/// is read once every [`POLLS_PER_READ`] polls, not twice a poll, so that a poll loop sees NCCL
/// done about as soon as a bare one would. The limit counts from the first read, at the 16th
/// poll, and is found passed at most 16 polls after it: a wait lasts the limit plus at most 31
/// polls.
pub(crate) struct PollClock {
    limit: Duration,
    start: Option<Instant>,
    /// Polls until the next read of the clock, while spinning (1 to `POLLS_PER_READ`).
    polls_left: u32,
    spinning: bool,
}

impl PollClock {
    pub(crate) fn new(limit: Duration) -> PollClock {
        PollClock {
            limit,
            start: None,
            polls_left: POLLS_PER_READ,
            spinning: true,
        }
    }

    /// After a poll that found NCCL busy: pauses as the time waited calls for and returns
    /// `true`, or `false` once the limit is past.
    pub(crate) fn again(&mut self) -> bool {
        match self.next(Instant::now) {
            Next::Poll => true,
            Next::After(pause) => {
                pause.take();
                true
            }
            Next::GiveUp => false,
        }
    }

    fn next(&mut self, now: impl FnOnce() -> Instant) -> Next {
        if self.spinning {
            self.polls_left -= 1;
            if self.polls_left > 0 {
                return Next::Poll;
            }
            self.polls_left = POLLS_PER_READ;
        }
        let now = now();
        let waited = now.saturating_duration_since(*self.start.get_or_insert(now));
        if waited >= self.limit {
            return Next::GiveUp;
        }
        let pause = pause_after(waited);
        self.spinning = pause == Pause::Spin;
        Next::After(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Deadline, Next, POLLS_PER_READ, Pause, PollClock, SPIN_FOR, YIELD_UNTIL, pause_after,
    };
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    /// The pause depends on the time waited, not on how many polls were made: a wait as long
    /// as a nonblocking collective's launch (about 60 µs on an H200) still spins.
    #[test]
    fn a_poll_loop_spins_through_a_collective_launch_then_yields_then_sleeps() {
        assert_eq!(pause_after(Duration::ZERO), Pause::Spin);
        assert_eq!(pause_after(Duration::from_micros(60)), Pause::Spin);
        assert_eq!(pause_after(SPIN_FOR - Duration::from_nanos(1)), Pause::Spin);
        assert_eq!(pause_after(SPIN_FOR), Pause::Yield);
        assert_eq!(
            pause_after(YIELD_UNTIL - Duration::from_nanos(1)),
            Pause::Yield
        );
        assert_eq!(pause_after(YIELD_UNTIL), Pause::Sleep);
        assert_eq!(pause_after(Duration::from_secs(120)), Pause::Sleep);
    }

    /// A clock that advances by `step` at every read, and counts its reads.
    struct Fake {
        base: Instant,
        at: Cell<Duration>,
        step: Duration,
        reads: Cell<u32>,
    }

    impl Fake {
        fn new(step: Duration) -> Fake {
            Fake {
                base: Instant::now(),
                at: Cell::new(Duration::ZERO),
                step,
                reads: Cell::new(0),
            }
        }

        fn read(&self) -> Instant {
            self.reads.set(self.reads.get() + 1);
            let t = self.base + self.at.get();
            self.at.set(self.at.get() + self.step);
            t
        }
    }

    /// The polls of a spin read the clock once every `POLLS_PER_READ`; from the yield on, every
    /// poll reads it; the limit counts from the first read and ends the wait exactly there.
    #[test]
    fn a_spin_reads_the_clock_every_sixteen_polls_and_the_limit_ends_the_wait() {
        let limit = Duration::from_millis(3);
        let fake = Fake::new(Duration::from_micros(10));
        let mut clock = PollClock::new(limit);
        let mut seen = Vec::new();
        for _ in 0..100_000 {
            let next = clock.next(|| fake.read());
            seen.push(next);
            if next == Next::GiveUp {
                break;
            }
        }
        assert_eq!(seen.last(), Some(&Next::GiveUp), "the wait ended");
        let reads = fake.reads.get() as usize;
        // Reads at 0, 10, .., 3000 µs: the last one, at the limit, gives up.
        assert_eq!(reads, 301);
        // Spin (reads at 0 .. 240 µs): one read per 16 polls; the 26th read, at 250 µs, yields.
        let n = POLLS_PER_READ as usize;
        assert!(seen[..n - 1].iter().all(|s| *s == Next::Poll));
        assert_eq!(seen[n - 1], Next::After(Pause::Spin));
        let spin_polls = 26 * n - 1;
        assert_eq!(
            seen[..spin_polls]
                .iter()
                .filter(|s| **s != Next::Poll)
                .count(),
            25
        );
        // From 250 µs: every poll reads, first yielding (to 2 ms), then sleeping.
        let rest = &seen[spin_polls..];
        assert_eq!(rest.len(), reads - 25);
        assert!(rest.iter().all(|s| *s != Next::Poll));
        assert_eq!(rest[0], Next::After(Pause::Yield));
        let yields = rest
            .iter()
            .filter(|s| **s == Next::After(Pause::Yield))
            .count();
        assert_eq!(yields, 175, "250 .. 2000 µs");
        assert_eq!(rest[rest.len() - 2], Next::After(Pause::Sleep));
    }

    /// A limit shorter than the spin: given up at the first read past it, still spinning.
    #[test]
    fn a_short_limit_is_kept_while_spinning() {
        let fake = Fake::new(Duration::from_micros(40));
        let mut clock = PollClock::new(Duration::from_micros(100));
        let mut polls = 0;
        while clock.next(|| fake.read()) != Next::GiveUp {
            polls += 1;
            assert!(polls < 1000, "never gave up");
        }
        // Reads at 0, 40, 80 µs spin; the one at 120 µs gives up: 4 reads, 64 polls.
        assert_eq!(fake.reads.get(), 4);
        assert_eq!(polls + 1, 4 * POLLS_PER_READ);
    }

    /// The real clock: a wait of 2 ms is given up no sooner than 2 ms after the clock is made.
    #[test]
    fn the_real_clock_gives_up_no_sooner_than_the_limit() {
        let t0 = Instant::now();
        let mut clock = PollClock::new(Duration::from_millis(2));
        while clock.again() {}
        assert!(t0.elapsed() >= Duration::from_millis(2));
    }

    /// A limit past what `Instant` holds is a wait without end, not a panic
    /// (`Launched::wait(Duration::MAX)` and `Bootstrap::timeout(Duration::MAX)`
    /// panicked with an `Instant` overflow); an ordinary one passes.
    #[test]
    fn a_deadline_past_what_instant_holds_never_passes() {
        let never = Deadline::after(Duration::MAX);
        assert!(!never.passed());
        assert_eq!(never.left(), Duration::MAX);
        let soon = Deadline::after(Duration::from_millis(1));
        assert!(soon.left() <= Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(2));
        assert!(soon.passed());
        assert_eq!(soon.left(), Duration::ZERO);
        assert!(Deadline::after(Duration::ZERO).passed());
    }
}
