//! Temporary probe: which host call of a handoff waits for the GPU.
use std::time::Instant;
use um::kernels::testing;
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let spin = 2_000_000u64; // 2 ms
    for round in 0..3 {
        let busy = Managed::<[f32]>::zeroed_slice(&ctx, 1024)?;
        let other = Managed::<[f32]>::zeroed_slice(&ctx, 1024)?;
        let fresh = Managed::<[f32]>::zeroed_slice(&ctx, 1024)?;
        ctx.with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                let mut busy = busy.attach(a)?;
                let mut other = other.attach(b)?;
                testing::spin_then_add(a, &mut busy, 1.0, spin)?;
                let t = Instant::now();
                let fresh = fresh.attach(a)?;
                let t_attach_fresh_same = t.elapsed();
                testing::spin_then_add(b, &mut other, 1.0, spin)?;
                let t = Instant::now();
                let fresh = fresh.hand_off(b)?; // fresh: no kernel uses it, A busy
                let t_handoff_idle_buf = t.elapsed();
                let t = Instant::now();
                let busy = busy.hand_off(b)?; // in use by A's running kernel
                let t_handoff_busy_buf = t.elapsed();
                let t = Instant::now();
                let _ = a.is_idle()?;
                let t_query = t.elapsed();
                println!(
                    "round {round}: attach fresh to busy A {:?}; hand_off unused buffer A->B {:?}; hand_off buffer in use on A {:?}; query {:?}; A idle now: {}",
                    t_attach_fresh_same, t_handoff_idle_buf, t_handoff_busy_buf, t_query, a.is_idle()?
                );
                let _ = b.sync_all((fresh, busy, other))?;
                Ok(())
            })
        })?;
    }
    Ok(())
}
