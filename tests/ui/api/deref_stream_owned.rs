// Where the "sync it first" message cannot appear. `Deref` exists only
// under `S: HostAccess`, but rustc looks a dereference up without reporting the bound that
// failed: `*buf`, a deref coercion and a slice method reached through `Deref` give the plain
// errors (E0614, E0308, E0599). The buffer is just as out of reach; only `Index`, `IndexMut`,
// `iter` and `iter_mut` (this folder's other cases) name `HostAccess` in the error.
use um::{Context, Managed, StreamOptions};

fn deref(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let data = data.attach(stream)?;
        let all: &[f32] = &*data;
        let coerced: &[f32] = &data;
        let first = data.first();
        println!("{} {} {first:?}", all.len(), coerced.len());
        data.sync().map(drop)
    })
}

fn main() {
    let _ = deref;
}
