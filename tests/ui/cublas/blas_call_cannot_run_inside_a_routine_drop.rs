// Re-entrancy. For a `Blas` call to run inside another call of the same
// `Blas` (between its bind and its record), user code would have to run inside `Blas::run`: a
// `Drop` of something the call owns, or a user `Storage`. Every argument is borrowed, and
// `Storage` is sealed. Expected: E0277 (or E0407/E0046), a user type cannot implement `Storage`,
// so no user code runs between `enter` and `StreamOrder::record`.
use um::Storage;

struct Mine;

impl Storage for Mine {}

fn main() {}
