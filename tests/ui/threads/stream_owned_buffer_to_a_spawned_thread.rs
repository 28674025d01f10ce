// Rule: a buffer a stream owns stays inside that stream's scope, so `std::thread::spawn`, whose
// thread may outlive the scope, cannot take it; a scoped thread (`std::thread::scope`) can, and
// a host-owned buffer (after `sync`) can go anywhere.
use um::{Context, Managed, StreamOptions};

fn send(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let data = data.attach(stream)?;
        let worker = std::thread::spawn(move || data.sync().map(drop));
        worker.join().expect("the thread panicked")
    })
}

fn main() {
    let _ = send;
}
