// Rule 230: host-owned device memory means that no kernel may touch it, not that the CPU may
// read it. A device buffer has no host side: `Deref`, `Index` and `iter` need a storage that
// has one (`HostVisible`), in every state, the host state included. Its contents come back by a
// copy that waits (`to_vec`, `copy_to_host`).
use um::{Context, Managed};

fn read(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_device(ctx, &[1.0f32, 2.0, 3.0])?;
    let first: f32 = data[0];
    let all: &[f32] = &*data;
    let sum: f32 = data.iter().sum();
    println!("{first} {} {sum}", all.len());
    Ok(())
}

fn main() {
    let _ = read;
}
