// Nor for a type of one's own: `BlasStream` needs um's sealed `Eager` and
// um-cublas's private `Sealed` (rule 148).
struct Mine;

impl um_cublas::BlasStream for Mine {}

fn main() {}
