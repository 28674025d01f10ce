// Rule 230: host access written generically over the storage (`M: Storage`) cannot be reached:
// inside the helper the compiler does not know that `M` has a host side, so `Index` and `iter`
// are missing. Called with device memory, this would dereference an address that is no host
// memory. The bound that allows it is `M: HostVisible`, which `Device` does not implement.
use um::{HostOwned, Managed, Storage};

fn peek<M: Storage>(buf: &Managed<[f32], HostOwned, M>) -> f32 {
    let first = buf[0];
    let sum: f32 = buf.iter().sum();
    first + sum
}

fn main() {
    let _ = peek::<um::Device>;
}
