// Rule: memory attached to a stream cannot outlive the stream, across awaits too.
// The async scope's closure is generic over the brand, as the synchronous one is: memory
// carrying the brand cannot be the scope's result, however many `.await`s come first.
use um::{Context, Managed, StreamOptions};

async fn escape(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let escaped = ctx
        .with_stream_async(StreamOptions::new(), async |stream| {
            let data = data.attach(stream)?;
            std::future::ready(()).await;
            Ok(data)
        })
        .await?;
    drop(escaped);
    Ok(())
}

fn main() {
    let _ = escape;
}
