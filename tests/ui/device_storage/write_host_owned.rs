// Rule 230: the CPU may not write host-owned device memory in place either: `DerefMut`,
// `IndexMut` and `iter_mut` need a storage with a host side (`HostVisible`). Its contents are
// replaced by a copy that waits (`copy_from_host`).
use um::{Context, DeviceManaged};

fn write(ctx: &Context) -> um::Result<()> {
    let mut data = DeviceManaged::<[f32]>::zeroed_slice_device(ctx, 3)?;
    data[0] = 1.0;
    let all: &mut [f32] = &mut *data;
    all[1] = 2.0;
    data.iter_mut().for_each(|v| *v = 3.0);
    Ok(())
}

fn main() {
    let _ = write;
}
