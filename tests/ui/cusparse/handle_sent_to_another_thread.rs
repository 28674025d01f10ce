// Rule: a cuSPARSE handle is of one thread and one stream (`Sparse` is neither `Send` nor
// `Sync`): its workspace is ordered by its stream, and the handle is not thread-safe.
use um::{Context, StreamOptions};
use um_cusparse::Sparse;

fn send(ctx: &Context) -> um::Result<()> {
    ctx.with_stream(StreamOptions::new(), |s| {
        let sparse = Sparse::new(s)?;
        std::thread::scope(|scope| {
            scope.spawn(move || drop(sparse));
        });
        Ok(())
    })
}

fn main() {
    let _ = send;
}
