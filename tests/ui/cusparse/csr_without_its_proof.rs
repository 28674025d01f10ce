// Rule: a CSR matrix exists only with its structure proved: its fields are private, so the only
// way to make one is `Csr::new`, which checks the offsets and indices.
use um_cusparse::Csr;

fn forge() -> Csr<f32> {
    Csr { rows: 1, cols: 1 }
}

fn main() {
    let _ = forge;
}
