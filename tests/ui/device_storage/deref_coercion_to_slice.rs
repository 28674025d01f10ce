// Rule 230: a device buffer does not coerce to a slice on the CPU (no `Deref`): a function
// taking `&[f32]` cannot be given one, host-owned or not.
use um::{Context, Managed};

fn sum(v: &[f32]) -> f32 {
    v.iter().sum()
}

fn read(ctx: &Context) -> um::Result<f32> {
    let data = Managed::from_slice_device(ctx, &[1.0f32, 2.0, 3.0])?;
    Ok(sum(&data))
}

fn main() {
    let _ = read;
}
