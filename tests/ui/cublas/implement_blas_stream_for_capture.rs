// No crate but um-cublas may declare that cuBLAS runs on a capture stream:
// for um's `Capture` the orphan rule refuses `BlasStream` (rule 148). A kind of one's own is
// `implement_blas_stream_for_own_kind`.
impl um_cublas::BlasStream for um::Capture {}

fn main() {}
