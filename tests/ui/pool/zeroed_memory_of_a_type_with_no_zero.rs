// Rule 241: memory born on a stream is read only once written, and what its zero fill writes
// must be a value of the element type: `alloc_zeroed` (and `zeroed_slice_device`) take only
// `Zeroable` types. A `NonZeroU32` may cross to the device (`DeviceCopy`), but all-zero bytes
// are no `NonZeroU32`.
use std::num::NonZeroU32;

use um::{Context, DeviceManaged, MemPool, StreamOptions};

fn zeros(ctx: &Context, pool: &MemPool) -> um::Result<()> {
    let _d = DeviceManaged::<[NonZeroU32]>::zeroed_slice_device(ctx, 4)?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = s.alloc_zeroed::<NonZeroU32>(pool, 4)?;
        x.sync().map(drop)
    })
}

fn main() {
    let _ = zeros;
}
