// `Blas::drop` and `Blas::enter` decide from the *calling* thread's capture count
// (`thread_is_capturing`). If a `&Blas` could reach a scoped thread spawned inside a capture
// closure, two threads would use one handle at once (cuBLAS handles are not thread-safe) and the
// move-to-another-stream wait would be decided on a thread that is not capturing. Refused:
// `Blas` is `!Sync` (its `Cell<u64>`), so `&Blas` is not `Send` (E0277).
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

fn attack(ctx: &Context) -> um::Result<()> {
    let blas = Blas::new(ctx).expect("cuBLAS");
    let x = Managed::from_slice(ctx, &[0.0f32; 256])?;
    let a = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let c = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let x = x.attach(&s[0])?;
        let (a, mut c) = (a.attach(&s[1])?, c.attach(&s[1])?);
        let (graph, ()) = s[0].capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            std::thread::scope(|t| {
                t.spawn(|| blas.gemm(&s[1], &Gemm::new(2, 2, 2), &a, &a, &mut c));
            });
            Ok(((x,), ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = attack;
}
