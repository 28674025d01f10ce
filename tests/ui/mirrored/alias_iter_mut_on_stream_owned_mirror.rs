// The storage aliases (`MirroredManaged<T, S>`, `CoherentManaged<T, S>`) take
// a state parameter, but naming a stream state through them changes nothing: `iter_mut` and
// `IndexMut` still need `S: HostAccess`. (A write to the pinned half of a stream-owned mirror
// would also be missed by the next `sync`, which copies the device half over it.)
use um::{CoherentManaged, MirroredManaged, StreamOwned};

fn scribble<'s>(
    m: &mut MirroredManaged<[f32], StreamOwned<'s>>,
    c: &mut CoherentManaged<[f32], StreamOwned<'s>>,
) {
    for x in m.iter_mut() {
        *x = 0.0;
    }
    c[0] = 1.0;
}

fn main() {
    let _ = scribble;
}
