// Rule 50: the storages are Unified and Mirror, and no other crate may add one: `um` could not
// know what to copy, allocate or free for it.
use um::Storage;

struct Remote;

impl Storage for Remote {
    const NAME: &'static str = "remote";
}

fn main() {}
