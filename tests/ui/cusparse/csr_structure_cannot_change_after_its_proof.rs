// Rule: a CSR matrix's structure is proved once, by `Csr::new`, and cannot change afterwards:
// its row offsets and column indices are only readable (the values may be rewritten in place,
// `values_mut`, which moves no entry).
use um::{Context, Result};
use um_cusparse::Csr;

fn corrupt(ctx: &Context) -> Result<()> {
    let mut a = Csr::new(ctx, 2, 2, &[0, 1, 2], &[0, 1], &[1.0f32, 2.0])?;
    a.values_mut()[0] = 3.0; // fine
    a.col_indices()[1] = 1_000_000; // an index past the columns
    Ok(())
}

fn main() {
    let _ = corrupt;
}
