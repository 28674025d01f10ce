// Rule: a `Linear` that `Linear::new` checked cannot be changed afterwards: its fields are
// private, so a valid launch cannot be turned into an empty or index-wrapping one.
use um::Linear;

fn main() -> um::Result<()> {
    let mut l = Linear::new(1, 64)?;
    l.blocks = u32::MAX;
    let _ = l;
    Ok(())
}
