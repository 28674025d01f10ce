// A waker (run inside um's stream callback) that holds a stream-owned
// buffer, so that its drop (a `cuStreamSynchronize`, or a callback enqueued) would run inside the
// callback. Expected: refused, the brand `'s` is not `'static` and `Waker::from` needs
// `W: Wake + Send + Sync + 'static` (E0521, borrowed data escapes the closure). This is what
// keeps every stream-owned drop, `Graph` and `Stream` out of wakers: only `'static` values
// (`Context`, `Module`, `Kernel`, host-owned `Managed`, `StreamOrder`, `Blas`, `Comm`) reach one.
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};

use um::{Context, Created, Managed, StreamOptions, StreamOwned};

struct Holder<'s> {
    held: Mutex<Option<Managed<[f32], StreamOwned<'s, Created>>>>,
}

impl Wake for Holder<'static> {
    fn wake(self: Arc<Self>) {
        drop(self.held.lock().ok().and_then(|mut g| g.take()));
    }
}

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let x = Managed::<[f32]>::zeroed_slice(&ctx, 4)?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let holder = Arc::new(Holder {
            held: Mutex::new(Some(x)),
        });
        let _waker = Waker::from(holder);
        Ok(())
    })
}
