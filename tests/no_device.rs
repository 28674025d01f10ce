//! What a machine without a GPU (CI) can check of the run-time behaviour: the driver library
//! loads, and asking for a device gives a clear error rather than a panic.

use um::{Context, Error};

#[test]
fn a_missing_or_absent_device_is_an_error_not_a_panic() {
    // On a machine with no GPU this is NoDevice; with GPUs, no machine has this many.
    let err = Context::new(4096).expect_err("device 4096 does not exist");
    match &err {
        Error::NoDevice { .. } | Error::InvalidDevice { ordinal: 4096, .. } => {}
        other => panic!("unexpected error: {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("no CUDA-capable device") || text.contains("does not exist"),
        "{text}"
    );
}

#[test]
fn device_zero_is_usable_or_reported_missing() {
    match Context::new(0) {
        Ok(ctx) => assert!(!ctx.info().name.is_empty()),
        Err(e) => assert!(e.is_no_device(), "device 0 failed for another reason: {e}"),
    }
}
