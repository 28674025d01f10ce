//! Faults on the GPU: a kernel that traps and one that writes out of bounds.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests
//!
//! A fault leaves the CUDA context unusable ("sticky"), for the rest of the process. Each test
//! therefore runs twice: as the parent it re-runs itself in a child process (the same test
//! binary, this one test, `UM_FAULT_CHILD` set) and checks what the child reports; as the child
//! it makes the fault happen and checks, in-process, that the fault comes back as an `Err`
//! naming the CUDA error, that every later call on the context fails too, and that no drop path
//! panics. Both halves assert; neither can pass without the GPU doing what is claimed.
//!
//! The faulty kernels are hand-written PTX launched with the `unsafe` `Stream::launch`, whose
//! contract they break on purpose. They are not in kernels-ptx/: a kernel there gets a *safe*
//! launcher, and these must never have one.
//!
//! The test names start with `fault_`: the sanitizer mode of the GPU run script skips them.

mod common;

use common::{gpu, is_fault_child, run_in_child};
use um::{Context, Error, LaunchConfig, Managed, StreamOptions};

/// `oob_write(ptr)`. The other faulty kernel, `trap_kernel`, is `common::TRAP_PTX`.
const OOB_PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

// Writes one float 1 TiB past the buffer: far outside any allocation.
.visible .entry oob_write(.param .u64 oob_write_param_0)
{
	.reg .b64 	%rd<4>;
	.reg .f32 	%f<2>;
	ld.param.u64 	%rd1, [oob_write_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	add.s64 	%rd3, %rd2, 1099511627776;
	mov.f32 	%f1, 0f3F800000;
	st.global.f32 	[%rd3], %f1;
	ret;
}
"#;

fn error_name(e: &Error) -> &str {
    match e {
        Error::Driver { name, .. } => name,
        _ => "",
    }
}

/// Child: launches `kernel` of `ptx` and checks what follows.
fn fault_scenario(ptx: &'static str, kernel: &str, expected: &[&str]) {
    let ctx = gpu();
    let k = ctx
        .load_ptx(ptx)
        .and_then(|m| m.kernel(kernel))
        .expect("load");
    let x = Managed::from_slice(&ctx, &[0.0f32; 16]).expect("alloc");
    let err = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            // SAFETY: none; this launch breaks the contract on purpose, in a child process.
            unsafe { s.launch(&k, LaunchConfig::grid_1d(1, 1), (&mut x,)) }?;
            x.sync().map(drop) // the wait reports the fault; `x` is dropped (and leaked)
        })
        .expect_err("the fault is reported");
    println!("fault reported: {err}");
    assert!(
        expected.contains(&error_name(&err)),
        "unexpected error: {err:?}"
    );
    assert!(
        err.to_string().contains("cuStreamSynchronize"),
        "names the call: {err}"
    );

    // Sticky: every later call on the context fails, with an Err, never a panic.
    let later: Vec<(&str, Error)> = vec![
        (
            "allocate",
            Managed::from_slice(&ctx, &[1.0f32]).expect_err("allocation after a fault"),
        ),
        (
            "create a stream",
            ctx.with_stream(StreamOptions::new(), |_| Ok(()))
                .expect_err("stream after a fault"),
        ),
        (
            "wait for the device",
            ctx.wait_idle().expect_err("sync after a fault"),
        ),
        (
            "query memory",
            ctx.mem_info().expect_err("mem info after a fault"),
        ),
    ];
    for (what, e) in &later {
        println!("after the fault, {what}: {e}");
        assert!(matches!(e, Error::Driver { .. }), "{what}: {e:?}");
    }
    // A second handle to the device sees the same dead context.
    match Context::new(0) {
        Ok(second) => {
            let e = Managed::from_slice(&second, &[1.0f32]).expect_err("second handle");
            println!("a new handle to device 0: {e}");
        }
        Err(e) => println!("a new handle to device 0: {e}"),
    }
    // Dropping everything (the context last) panics nowhere: reaching the end is the check.
    drop(ctx);
    println!("every drop returned");
}

#[test]
#[ignore = "needs a CUDA device"]
fn fault_trap_is_reported_and_sticky() {
    if is_fault_child() {
        return fault_scenario(
            common::TRAP_PTX,
            "trap_kernel",
            &["CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION"],
        );
    }
    let out = run_in_child("fault_trap_is_reported_and_sticky");
    assert!(out.contains("fault reported: cuStreamSynchronize failed: CUDA_ERROR_"));
}

#[test]
#[ignore = "needs a CUDA device"]
fn fault_out_of_bounds_write_is_reported_and_sticky() {
    if is_fault_child() {
        return fault_scenario(
            OOB_PTX,
            "oob_write",
            &["CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED"],
        );
    }
    let out = run_in_child("fault_out_of_bounds_write_is_reported_and_sticky");
    assert!(out.contains("fault reported: cuStreamSynchronize failed: CUDA_ERROR_"));
}

/// A sync future awaited inside a capture closure trusts its stream callback's status (it
/// makes no `cuStreamQuery` on a capturing thread, where the driver would refuse it): a trap on
/// the future's stream, behind a 300 ms spin that holds it while the capture begins, must still
/// come back as the future's `Err`, never as a buffer handed to the CPU.
#[test]
#[ignore = "needs a CUDA device"]
fn fault_before_a_sync_future_awaited_in_a_capture_closure_is_its_err() {
    if !is_fault_child() {
        let out =
            run_in_child("fault_before_a_sync_future_awaited_in_a_capture_closure_is_its_err");
        assert!(out.contains("fault reported: "));
        return;
    }
    use um_test_kernels::testing::{add_scalar, spin_then_add};
    let ctx = gpu();
    let trap = ctx
        .load_ptx(common::TRAP_PTX)
        .and_then(|m| m.kernel("trap_kernel"))
        .expect("load");
    // Mirrored: a capture of it needs no concurrent managed access.
    let x = Managed::from_slice_mirrored(&ctx, &[0.0f32; 256]).expect("alloc");
    let y = Managed::from_slice(&ctx, &[0.0f32; 16]).expect("alloc");
    let mut awaited: Option<um::Result<f32>> = None;
    let captured = ctx.with_stream(StreamOptions::new(), |s| {
        let mut y = y.attach(s)?;
        spin_then_add(s, &mut y, 1.0, 300_000_000)?;
        // SAFETY: none; this launch breaks the contract on purpose, in a child process.
        unsafe { s.launch(&trap, LaunchConfig::grid_1d(1, 1), (&mut y,)) }?;
        let x = x.attach(s)?;
        s.capture((x,), |cap, (mut x,)| {
            add_scalar(cap, &mut x, 1.0)?;
            awaited = Some(pollster::block_on(y.sync_async()).map(|y| y[0]));
            Ok(((x,), ()))
        })
        .map(drop)
    });
    println!("the capture: {captured:?}");
    match awaited {
        Some(Err(e)) => println!("fault reported: {e}"),
        Some(Ok(v)) => panic!(
            "a sync future awaited in a capture closure handed the CPU a buffer whose stream \
             faulted (first element {v})"
        ),
        None => panic!("the capture did not begin before the fault: {captured:?}"),
    }
    drop(ctx);
    println!("every drop returned");
}
