// A helper generic over every eager stream kind cannot forward to cuBLAS,
// whose calls take `K: BlasStream` (sealed in um-cublas, implemented for the four eager kinds
// by name): `Eager` does not imply `BlasStream`, so no generic path reaches a `Capture` stream
// either (rule 148).
use um::{Eager, Managed, Stream, StreamOwned};
use um_cublas::{Blas, Gemm};

fn forward<'s, K: Eager>(
    blas: &Blas,
    s: &Stream<'s, K>,
    a: &Managed<[f32], StreamOwned<'s, K>>,
    c: &mut Managed<[f32], StreamOwned<'s, K>>,
) -> um_cublas::Result<()> {
    blas.gemm(s, &Gemm::new(2, 2, 2), a, a, c)
}

fn main() {
    let _ = forward::<um::Created>;
}
