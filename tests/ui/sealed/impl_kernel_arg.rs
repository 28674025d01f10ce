// Forge a kernel argument (a raw device pointer of host-owned memory) by implementing the
// public `KernelArg` trait for a type of ours.
struct Forged(u64);
impl<'s> um::KernelArg<'s> for Forged {
    type Raw = u64;
    fn raw(&self, _: ()) -> u64 {
        self.0
    }
}
fn main() {}
