// Twins of tests/ui/graphs: a capture records launches on its own buffers, the graph holds them
// while it exists, replays on their stream, updates a scalar through a node, gives the buffers
// to the host between replays, and back by a wait; a capture forks and joins by `hand_off`.
use um_test_kernels::testing;
use um::{Context, Linear, Managed, StreamOptions};

fn capture_replay_sync(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice_mirrored(ctx, &[2.0f32; 256])?;
    let (x, y) = ctx.with_stream(StreamOptions::new(), |s| {
        let (x, y) = (x.attach(s)?, y.attach(s)?);
        let (mut graph, step) = s.capture((x, y), |cap, (x, mut y)| {
            testing::axpy(cap, &x, &mut y, 2.0)?;
            let step = testing::add_scalar_node(cap, Linear::for_len(cap, y.len()), &mut y, 1.0)?;
            Ok(((x, y), step))
        })?;
        for i in 0..10 {
            graph.set(&step, (i as f32,))?;
            graph.launch(s)?;
        }
        let sum = graph.host(s, |(x, y)| {
            x[0] = 0.0;
            y.iter().sum::<f32>()
        })?;
        assert!(sum > 0.0);
        graph.launch(s)?;
        graph.sync()
    })?;
    assert_eq!(x.len(), y.len());
    Ok(())
}

fn fork_and_join(ctx: &Context) -> um::Result<()> {
    let batches: Vec<_> = (0..4)
        .map(|k| Managed::from_fn_coherent(ctx, 1024, |j| (k + j) as f32))
        .collect::<um::Result<_>>()?;
    let batches = ctx.with_stream(StreamOptions::new(), |s| {
        let batches = batches
            .into_iter()
            .map(|b| b.attach(s))
            .collect::<um::Result<Vec<_>>>()?;
        let (graph, ()) = s.capture_streams(2, batches, |caps, batches| {
            let (a, b) = (&caps[0], &caps[1]);
            let mut out = Vec::new();
            for mut x in batches {
                testing::add_scalar(a, &mut x, 1.0)?;
                let mut x = x.hand_off(b)?; // a fork: B waits for A's work on x
                testing::add_scalar(b, &mut x, 2.0)?;
                out.push(x);
            }
            Ok((out, ()))
        })?;
        graph.launch(s)?;
        let batches = graph.into_buffers()?;
        s.sync_all(batches)
    })?;
    drop(batches);
    Ok(())
}

fn main() {
    let _ = capture_replay_sync;
    let _ = fork_and_join;
}
