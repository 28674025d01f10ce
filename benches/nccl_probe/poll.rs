//! `nccl_probe --poll ROUNDS`: where um's host time per step on nonblocking communicators goes
//! (the goal: ≤ +1 µs over the raw call). The same grouped all-reduce of 1 KiB per GPU,
//! on um's nonblocking communicators, mirrors and streams, issued raw and polled in several
//! ways, and through um's `Group`; batches of 32 steps taking turns, the streams drained between
//! batches. Prints, per variant, the median over rounds of each round's median step, and the
//! median (with the 5th and 95th percentiles) of its per-round difference from the raw step
//! polled in a tight loop. With `--blocking`, the same on blocking communicators (a poll
//! returns at once). Also prints the clock source and what one `Instant::now` costs.

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use super::{Nccl, Res};

const BATCH: usize = 32;

// With the `phase-timing` feature (bench/nccl_probe_phases), the time-stamp counter is read
// between the phases of um's launch and of the raw step: laps 0 to 10 are um's
// (`um::nccl::phases::NAMES`), 11 to 15 the raw step's (`RAW_PHASES`).
#[cfg(feature = "phase-timing")]
use um::nccl::phases;
#[cfg(not(feature = "phase-timing"))]
mod phases {
    pub(super) fn reset() {}
    pub(super) fn lap(_: usize) {}
}

/// The raw step's phases, laps 11 to 15.
#[cfg(feature = "phase-timing")]
const RAW_PHASES: [&str; 5] = [
    "raw: call list built",
    "raw: ncclGroupStart",
    "raw: NCCL's calls issued",
    "raw: ncclGroupEnd",
    "raw: poll",
];

/// How a raw step waits for NCCL after `ncclGroupEnd`.
#[derive(Clone, Copy)]
enum Poll {
    /// `ncclCommGetAsyncError` in a tight loop (um_bench's raw reference).
    Tight,
    /// The same, reading the clock for a deadline once per poll.
    Clock,
    /// um's loop: the deadline, then the time since the first poll, then a spin hint.
    UmLoop,
    /// `sched_yield` between polls.
    Yield,
    /// A tight poll, after 0.5 µs of busy work before `ncclGroupStart` (as if um's checks took
    /// that long): whether a step's median grows by what is added before it.
    Delay,
    /// A tight poll, then one byte read from each of 32 pages of a 128 KiB buffer: whether
    /// memory touched after a step costs more on nonblocking communicators (whose thread's exit
    /// may flush this thread's TLB).
    Touch,
    /// um's `Group` built (every check) and dropped unlaunched, then the raw step polled
    /// tightly: how much of um's time is its checks.
    Checks,
}

const VARIANTS: [(&str, Option<Poll>); 8] = [
    ("raw, tight poll", Some(Poll::Tight)),
    ("raw, clock per poll", Some(Poll::Clock)),
    ("raw, um's poll loop", Some(Poll::UmLoop)),
    ("raw, yield per poll", Some(Poll::Yield)),
    ("raw, 0.5 us of work first", Some(Poll::Delay)),
    ("raw, 32 pages read after", Some(Poll::Touch)),
    ("um's checks, then the raw step", Some(Poll::Checks)),
    ("um Group", None),
];

unsafe extern "C" {
    /// glibc: the CPU the calling thread runs on.
    fn sched_getcpu() -> c_int;
}

fn cpu() -> c_int {
    // SAFETY: no arguments; glibc's call reads the CPU number.
    unsafe { sched_getcpu() }
}

/// One raw step; returns the polls made after `ncclGroupEnd`.
///
/// # Safety
/// Live nonblocking communicators used by this thread only; each address is device memory of
/// at least `n` f32 owned by the work of its stream, of the communicator's device.
unsafe fn raw_step(
    nccl: &Nccl,
    calls: &[(u64, u64, *mut c_void)],
    comms: &[*mut c_void],
    n: usize,
    poll: Poll,
) -> Res<usize> {
    let ok = |rc: c_int| rc == 0 || rc == 7;
    let mut polls = 0;
    if matches!(poll, Poll::Delay) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_nanos(500) {
            std::hint::spin_loop();
        }
    }
    // SAFETY: the caller's guarantees.
    unsafe {
        if !ok((nccl.group_start)()) {
            return Err("ncclGroupStart".into());
        }
        phases::lap(12);
        for (&(p, q, s), &c) in calls.iter().zip(comms) {
            let rc = (nccl.all_reduce)(p as *const c_void, q as *mut c_void, n, 7, 0, c, s);
            if !ok(rc) {
                return Err(format!("ncclAllReduce {rc}").into());
            }
        }
        phases::lap(13);
        if !ok((nccl.group_end)()) {
            return Err("ncclGroupEnd".into());
        }
        phases::lap(14);
        let deadline = Instant::now() + Duration::from_secs(10);
        for &c in comms {
            let start = Instant::now();
            let mut state: c_int = 7;
            loop {
                polls += 1;
                if (nccl.async_error)(c, &mut state) != 0 {
                    return Err("ncclCommGetAsyncError".into());
                }
                if state != 7 {
                    break;
                }
                match poll {
                    Poll::Tight | Poll::Delay | Poll::Touch | Poll::Checks => {}
                    Poll::Clock => {
                        if Instant::now() >= deadline {
                            return Err("timeout".into());
                        }
                    }
                    Poll::UmLoop => {
                        if Instant::now() >= deadline {
                            return Err("timeout".into());
                        }
                        if start.elapsed() < Duration::from_micros(250) {
                            std::hint::spin_loop();
                        } else {
                            std::thread::yield_now();
                        }
                    }
                    Poll::Yield => std::thread::yield_now(),
                }
            }
            if state != 0 {
                return Err(format!("NCCL async error {state}").into());
            }
        }
        phases::lap(15);
    }
    if matches!(poll, Poll::Touch) {
        PAGES.with(|p| {
            let mut sum = 0u8;
            for page in p.chunks(4096) {
                sum = sum.wrapping_add(std::hint::black_box(page[64]));
            }
            std::hint::black_box(sum);
        });
    }
    Ok(polls)
}

thread_local! {
    static PAGES: Vec<u8> = vec![1u8; 32 * 4096];
}

/// The sum over CPUs of the "TLB shootdowns" row of /proc/interrupts (0 where there is none).
fn tlb_shootdowns() -> u64 {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    text.lines()
        .find(|l| l.trim_start().starts_with("TLB:"))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .map_while(|w| w.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// Per phase, the median and the mean over every step of the raw tight-poll variant and of
/// um's `Group`, in ns (the counter's rate measured against `Instant` over 200 ms).
#[cfg(feature = "phase-timing")]
fn print_phases(laps: &mut [Vec<[u64; 16]>], blocking: bool) {
    let (i0, c0) = (Instant::now(), phases::tsc());
    std::thread::sleep(Duration::from_millis(200));
    let per_ns = (phases::tsc() - c0) as f64 / i0.elapsed().as_nanos() as f64;
    let names = phases::NAMES.iter().chain(&RAW_PHASES);
    for (v, (variant, poll)) in VARIANTS.iter().enumerate() {
        if !matches!(poll, None | Some(Poll::Tight)) {
            continue;
        }
        for (i, phase) in names.clone().enumerate() {
            let mut col: Vec<f64> = laps[v].iter().map(|r| r[i] as f64 / per_ns).collect();
            if col.iter().all(|x| *x == 0.0) {
                continue;
            }
            let mean = col.iter().sum::<f64>() / col.len() as f64;
            println!(
                "{{\"phase\":\"{phase}\",\"variant\":\"{variant}\",\"blocking\":{blocking},\"median_ns\":{:.1},\"mean_ns\":{mean:.1}}}",
                pct(&mut col, 0.5)
            );
        }
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

pub(crate) fn study(nccl: &Nccl, rounds: usize, blocking: bool) -> Res<()> {
    use um::nccl::{Comm, CommOptions, Group, ReduceOp};
    use um::{Context, Managed, StreamOptions};
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_else(|_| "unknown".to_owned());
    let t0 = Instant::now();
    let mut last = t0;
    for _ in 0..1_000_000 {
        last = Instant::now();
    }
    let ns = (last - t0).as_secs_f64() * 1e9 / 1e6;
    println!(
        "{{\"clocksource\":\"{}\",\"instant_now_ns\":{ns:.1},\"blocking\":{blocking}}}",
        source.trim()
    );
    let gpus = um::device_count()?;
    let ctxs: Vec<Context> = (0..gpus).map(Context::new).collect::<um::Result<_>>()?;
    let comms = Comm::init_all(&ctxs, CommOptions::new().blocking(blocking))?;
    let raw_comms: Vec<*mut c_void> = comms.iter().map(Comm::as_raw).collect();
    let n = 256;
    let mut bufs = Vec::new();
    for ctx in &ctxs {
        bufs.push((
            Managed::from_fn_mirrored(ctx, n, |_| 1.0f32)?,
            Managed::from_fn_mirrored(ctx, n, |_| 0.0f32)?,
        ));
    }
    let k = VARIANTS.len();
    let (steps, builds, polls, moves, tlb, mut all) =
        Context::with_stream_set_across(&ctxs, StreamOptions::new(), |streams| {
            let mut on = Vec::new();
            for ((a, b), s) in bufs.into_iter().zip(streams) {
                on.push((a.attach(s)?, b.attach(s)?));
            }
            // Per round, per variant: the median step (µs); per variant, polls per raw step.
            let mut steps = vec![vec![0.0f64; k]; rounds];
            let mut builds = vec![vec![0.0f64; k]; rounds];
            let mut polls = vec![0usize; k];
            let mut moves = vec![0usize; k];
            let mut tlb = vec![0u64; k];
            let mut all: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds * BATCH); k];
            let mut t = [0.0f64; BATCH];
            let mut b = [0.0f64; BATCH];
            #[cfg(feature = "phase-timing")]
            let mut laps: Vec<Vec<[u64; 16]>> = vec![Vec::new(); k];
            for round in 0..rounds + 1 {
                for j in 0..k {
                    let v = (round + j) % k;
                    let tlb0 = tlb_shootdowns();
                    for (step, build) in t.iter_mut().zip(&mut b) {
                        let c0 = cpu();
                        let s0 = Instant::now();
                        phases::reset();
                        match VARIANTS[v].1 {
                            None => {
                                let mut g = Group::new();
                                for (((a, b), s), c) in on.iter_mut().zip(streams).zip(&comms) {
                                    g.all_reduce(c, s, a, b, ReduceOp::Sum)?;
                                }
                                *build = s0.elapsed().as_secs_f64() * 1e6;
                                g.launch()?;
                                phases::lap(10);
                            }
                            Some(poll) => {
                                if matches!(poll, Poll::Checks) {
                                    let mut g = Group::new();
                                    for (((a, b), s), c) in on.iter_mut().zip(streams).zip(&comms) {
                                        g.all_reduce(c, s, a, b, ReduceOp::Sum)?;
                                    }
                                    drop(g);
                                }
                                let calls: Vec<(u64, u64, *mut c_void)> = on
                                    .iter_mut()
                                    .zip(streams.iter())
                                    .map(|((a, b), s)| {
                                        (
                                            a.as_device_ptr().address(),
                                            b.as_device_ptr_mut().address(),
                                            s.as_raw(),
                                        )
                                    })
                                    .collect();
                                phases::lap(11);
                                *build = s0.elapsed().as_secs_f64() * 1e6;
                                // SAFETY: um's nonblocking communicators, used by this thread
                                // only; mirrors' device halves owned by each GPU's stream, n f32.
                                let p = unsafe { raw_step(nccl, &calls, &raw_comms, n, poll) }
                                    .map_err(|e| um::Error::Bootstrap {
                                        reason: e.to_string(),
                                    })?;
                                if round > 0 {
                                    polls[v] += p;
                                }
                            }
                        }
                        *step = s0.elapsed().as_secs_f64() * 1e6;
                        #[cfg(feature = "phase-timing")]
                        if round > 0 {
                            laps[v].push(phases::take());
                        }
                        if round > 0 && cpu() != c0 {
                            moves[v] += 1;
                        }
                    }
                    if round > 0 {
                        tlb[v] += tlb_shootdowns().saturating_sub(tlb0);
                    }
                    for s in streams {
                        s.wait_idle()?;
                    }
                    if round > 0 {
                        all[v].extend_from_slice(&t);
                        steps[round - 1][v] = pct(&mut t, 0.5);
                        builds[round - 1][v] = pct(&mut b, 0.5);
                    }
                }
            }
            for ((a, b), s) in on.into_iter().zip(streams) {
                s.sync_all((a, b))?;
            }
            #[cfg(feature = "phase-timing")]
            print_phases(&mut laps, blocking);
            Ok((steps, builds, polls, moves, tlb, all))
        })?;
    for (v, (name, _)) in VARIANTS.iter().enumerate() {
        let mut own: Vec<f64> = steps.iter().map(|r| r[v]).collect();
        let mut diff: Vec<f64> = steps.iter().map(|r| r[v] - r[0]).collect();
        let mut build: Vec<f64> = builds.iter().map(|r| r[v]).collect();
        println!(
            "{{\"variant\":\"{name}\",\"rounds\":{rounds},\"median_step_us\":{:.3},\"build_us\":{:.3},\"minus_tight\":{:.3},\"p5\":{:.3},\"p95\":{:.3},\"polls_per_step\":{:.1},\"steps_moved_cpu\":{:.4},\"tlb_shootdowns_per_step\":{:.2}}}",
            pct(&mut own, 0.5),
            pct(&mut build, 0.5),
            pct(&mut diff, 0.5),
            pct(&mut diff, 0.05),
            pct(&mut diff, 0.95),
            polls[v] as f64 / (rounds * BATCH) as f64,
            moves[v] as f64 / (rounds * BATCH) as f64,
            tlb[v] as f64 / (rounds * BATCH) as f64,
        );
    }
    // Every step of every round, pooled: whether um moves the whole distribution or changes
    // how many steps fall in NCCL's slow mode.
    for (v, (name, _)) in VARIANTS.iter().enumerate() {
        let q: Vec<String> = [0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9]
            .iter()
            .map(|&p| format!("{:.2}", pct(&mut all[v], p)))
            .collect();
        println!(
            "{{\"variant\":\"{name}\",\"step_us_p5_p10_p25_p40_p50_p60_p75_p90\":[{}]}}",
            q.join(",")
        );
    }
    drop(comms);
    Ok(())
}
