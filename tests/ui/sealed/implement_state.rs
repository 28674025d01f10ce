// Rule: the states are HostOwned and StreamOwned, and no other crate may add one: a new state
// would come with no transition that makes it true.
use um::State;

struct DeviceOwned;

impl State for DeviceOwned {
    const ON_STREAM: bool = false;
}

fn main() {}
