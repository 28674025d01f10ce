//! What the test files share: the inputs line that um-build writes first in every PTX file,
//! computed here from its documentation (`Kernels::prebuilt_ptx`), apart from the library's own
//! code, so that a test that compares with it checks the documented format.

/// FNV-1a, 64 bits, of `bytes`, continuing from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `// um-build inputs <hex>` for the `.cu` file's text `cu`, the architecture (`compute_NN`)
/// and the flags: the hash of the `.cu` file, `um.cuh`, the architecture, then each flag, each
/// as its length (8 bytes, little-endian) and its bytes.
pub(crate) fn inputs_line(cu: &str, arch: &str, flags: &[&str]) -> String {
    let fields = [cu, um_build::HEADER, arch]
        .into_iter()
        .chain(flags.iter().copied());
    let h = fields.fold(0xcbf2_9ce4_8422_2325, |h, field| {
        fnv1a(
            fnv1a(h, &(field.len() as u64).to_le_bytes()),
            field.as_bytes(),
        )
    });
    format!("// um-build inputs {h:016x}")
}
