// Rule: only host-owned memory dereferences on the CPU. `Deref`, `Index` and `iter` are written
// generically over the state with the bound `S: HostAccess`, so no other
// crate may add a state with host access: `HostAccess` needs the sealed `State`. (Claiming it
// for `StreamOwned` is `host_access_for_stream_owned`.)
use um::HostAccess;

struct Mine;

impl HostAccess for Mine {}

fn main() {}
