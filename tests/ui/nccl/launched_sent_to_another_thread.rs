// Rule: a launched group holds `&Comm`s (`Comm` is `!Sync`) and the streams it
// waits for: `Launched::wait` polls the communicators, so it stays on the launching thread.
use um::nccl::Launched;

fn wait_elsewhere(launched: Launched<'static>) {
    std::thread::spawn(move || launched.wait(std::time::Duration::from_secs(1)));
}

fn main() {
    let _ = wait_elsewhere;
}
