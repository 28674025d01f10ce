// Rule: nor may a launched group be shared: `&Launched` gives `&Comm`s to
// another thread while their owner uses them.
use um::nccl::Launched;

fn share(launched: &'static Launched<'static>) {
    std::thread::spawn(move || format!("{launched:?}"));
}

fn main() {
    let _ = share;
}
