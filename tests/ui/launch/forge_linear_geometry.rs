// Rule: every `Linear` is a launch under which threads have distinct 31-bit indices: only
// `Linear::new` (which returns an error otherwise) and `Linear::for_len` make one, so its
// fields cannot be set to a wrapping or empty geometry by hand.
use um::Linear;

fn main() {
    let _ = Linear { blocks: u32::MAX, threads_per_block: 1024 };
}
