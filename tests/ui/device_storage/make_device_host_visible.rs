// Rule 230: no crate but um can declare that device memory has a host side: `HostVisible` is
// um's trait and `Device` um's type (the orphan rule), and a storage of one's own cannot be
// made (`Storage` is sealed).
use um::{Device, HostVisible};

impl HostVisible for Device {}

fn main() {}
