// Rule: a product's output is none of its inputs: `y` is borrowed `&mut`, `x` and `A` `&`.
use um::{Context, Managed, StreamOptions};
use um_cusparse::{Csr, Op, Sparse};

fn alias(ctx: &Context) -> um::Result<()> {
    let a = Csr::new(ctx, 2, 2, &[0, 1, 2], &[0, 1], &[1.0f64, 2.0])?;
    let x = Managed::from_slice(ctx, &[1.0f64, 1.0])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut sparse = Sparse::new(s)?;
        let (a, mut x) = (a.attach(s)?, x.attach(s)?);
        sparse.spmv(s, Op::N, 1.0, &a, &x, 0.0, &mut x)?;
        let _ = a.sync()?;
        x.sync().map(drop)
    })
}

fn main() {
    let _ = alias;
}
