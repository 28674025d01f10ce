// Rule: a product reads only memory of the handle's stream: a matrix attached to the outer
// stream is no operand of a handle of the inner one (another brand).
use um::{Context, Managed, StreamOptions};
use um_cusparse::{Csr, Op, Sparse};

fn product(ctx: &Context) -> um::Result<()> {
    let a = Csr::new(ctx, 2, 2, &[0, 1, 2], &[0, 1], &[1.0f64, 2.0]).ok();
    let x = Managed::from_slice(ctx, &[1.0f64, 1.0])?;
    let y = Managed::from_slice(ctx, &[0.0f64, 0.0])?;
    ctx.with_stream(StreamOptions::new(), |outer| {
        let Some(a) = a.and_then(|a| a.attach(outer).ok()) else {
            return Ok(());
        };
        ctx.with_stream(StreamOptions::new(), |inner| {
            let Ok(mut sparse) = Sparse::new(inner) else {
                return Ok(());
            };
            let (x, mut y) = (x.attach(inner)?, y.attach(inner)?);
            let _ = sparse.spmv(inner, Op::N, 1.0, &a, &x, 0.0, &mut y);
            inner.sync_all((x, y)).map(drop)
        })?;
        let _ = a.sync();
        Ok(())
    })
}

fn main() {
    let _ = product;
}
