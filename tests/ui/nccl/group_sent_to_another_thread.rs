// Rule: NCCL's group state belongs to a thread: a `Group` being built on one thread
// cannot be launched on another.
use um::nccl::Group;

fn launch_elsewhere(group: Group<'static>) {
    std::thread::spawn(move || group.launch().map(drop));
}

fn main() {
    let _ = launch_elsewhere;
}
