// Rule 193: `relaxed_while_capturing` relaxes the driver's mode, not um's types: a GEMM on the capture
// stream inside it is still refused. Expected: E0277, `Capture` is not a `BlasStream`.
use um::{Context, Managed, StreamOptions, relaxed_while_capturing};
use um_cublas::{Blas, Gemm};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::new(0)?;
    let blas = Blas::new(&ctx)?;
    let x = Managed::from_slice(&ctx, &[0.0f32; 4])?;
    let y = Managed::from_slice(&ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, y) = (x.attach(s)?, y.attach(s)?);
        let (_graph, ()) = s.capture((x, y), |cap, (mut x, y)| {
            let _ = relaxed_while_capturing(|| blas.gemm(cap, &Gemm::new(1, 1, 1), &y, &y, &mut x));
            Ok(((x, y), ()))
        })?;
        Ok(())
    })?;
    Ok(())
}
