// Rule: a product reads only memory its stream owns: a host-owned matrix (the CPU may still
// write its values) is not an operand; attach it first, all three parts at once.
use um::{Context, Managed, StreamOptions};
use um_cusparse::{Csr, Op, Sparse};

fn product(ctx: &Context) -> um::Result<()> {
    let a = Csr::new(ctx, 2, 2, &[0, 1, 2], &[0, 1], &[1.0f64, 2.0])?;
    let x = Managed::from_slice(ctx, &[1.0f64, 1.0])?;
    let y = Managed::from_slice(ctx, &[0.0f64, 0.0])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut sparse = Sparse::new(s)?;
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        sparse.spmv(s, Op::N, 1.0, &a, &x, 0.0, &mut y)?;
        s.sync_all((x, y)).map(drop)
    })
}

fn main() {
    let _ = product;
}
