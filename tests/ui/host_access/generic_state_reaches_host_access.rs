// Host access written generically over the state (`S: HostAccess`) cannot be
// reached from a helper generic over every state (`S: State`): inside the helper the compiler
// does not know `S` is `HostOwned`, so `Index`, `iter` and `Deref` are all missing. Called with a
// stream-owned buffer, this would be a CPU read under a running kernel (rule 1).
use um::{Managed, State};

fn peek<S: State>(buf: &Managed<[f32], S>) -> f32 {
    let first = buf[0];
    let sum: f32 = buf.iter().sum();
    let all: &[f32] = &**buf;
    first + sum + all[1]
}

fn main() {
    let _ = peek::<um::HostOwned>;
}
