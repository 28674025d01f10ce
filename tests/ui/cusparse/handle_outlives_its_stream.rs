// Rule: a cuSPARSE handle belongs to its stream for its whole life: it carries the stream's
// brand, so it cannot leave the stream's closure (its drop unbinds it while the stream lives,
// and its workspace is the stream's).
use um::{Context, StreamOptions};
use um_cusparse::Sparse;

fn escape(ctx: &Context) -> um::Result<()> {
    let sparse = ctx.with_stream(StreamOptions::new(), |s| Ok(Sparse::new(s).ok()))?;
    drop(sparse);
    Ok(())
}

fn main() {
    let _ = escape;
}
