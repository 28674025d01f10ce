// Unsize a Managed<[f32; 4]> into Managed<[f32]> (or a trait object).
use um::{Context, Managed};
fn f(ctx: &Context) -> um::Result<()> {
    let m: Managed<[f32; 4]> = Managed::new(ctx, [0.0; 4])?;
    let s: Managed<[f32]> = m;
    drop(s);
    Ok(())
}
fn main() { let _ = f; }
