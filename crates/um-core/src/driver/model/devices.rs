//! The model's devices: how many (`UM_MODEL_DEVICES`, 1 unless set; at most 8), each with its
//! primary context, its own legacy NULL stream and, per thread, its own per-thread default
//! stream. A stream, an event and a pool belong to the context they were made in; memory is one
//! address space (managed memory is visible from every device).
//!
//! The current context of a thread that made none current is device 0's (as the one-device
//! model always was): um binds a context before its calls, so this only matters to the model's
//! own unit tests.

use std::sync::LazyLock;

use super::{LEGACY, State, Stream, spawn_worker};

/// The most devices the model emulates.
const MAX: usize = 8;

/// How many devices the model has: `UM_MODEL_DEVICES` (1 to 8), else 1.
pub(crate) fn count() -> usize {
    static COUNT: LazyLock<usize> = LazyLock::new(|| {
        std::env::var("UM_MODEL_DEVICES")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| (1..=MAX).contains(n))
            .unwrap_or(1)
    });
    *COUNT
}

/// Whether `device` is an ordinal of the model.
pub(crate) fn valid(device: i32) -> bool {
    usize::try_from(device).is_ok_and(|d| d < count())
}

/// Device `d`'s primary context handle: 0x10, 0x20, ... (below every id `new_id` draws).
pub(crate) fn context_of(device: i32) -> usize {
    0x10 * (device.max(0) as usize + 1)
}

/// Device 0's primary context.
pub(crate) const CONTEXT0: usize = 0x10;

/// The default memory pool of device `d`: 0x8, 0x9, ...
pub(crate) fn default_pool_of(device: i32) -> usize {
    0x8 + device.max(0) as usize
}

/// The legacy NULL stream of context `ctx`: [`LEGACY`] for device 0's, 0x100 + d for device d's.
pub(crate) fn legacy_of(ctx: usize) -> usize {
    match ctx / 0x10 {
        0 | 1 => LEGACY,
        d => 0x100 + (d - 1),
    }
}

/// Whether stream `id` is a context's legacy NULL stream.
pub(crate) fn is_legacy(id: usize) -> bool {
    id == LEGACY || (0x101..0x100 + MAX).contains(&id)
}

/// The legacy stream of `ctx`, made (with its worker) at its first use.
pub(crate) fn legacy_stream(g: &mut State, ctx: usize) -> usize {
    let id = legacy_of(ctx);
    if let std::collections::hash_map::Entry::Vacant(e) = g.streams.entry(id) {
        let mut s = Stream::new(true);
        s.context = ctx;
        e.insert(s);
        spawn_worker(id);
    }
    id
}

#[cfg(test)]
mod tests {
    //! Two contexts on the model's entry points (device 1's context made current directly:
    //! these run whatever `UM_MODEL_DEVICES` says).
    #![allow(clippy::undocumented_unsafe_blocks)] // the entry points' pointers are locals here

    use std::ffi::c_void;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use super::super::super::sys::{CUcontext, CUevent, CUstream, STREAM_LEGACY};
    use super::super::api::*;
    use super::super::tests::{busy, fill, managed, serial, stream, violation_of};
    use super::{CONTEXT0, context_of};

    /// Makes `ctx` current on this thread.
    fn enter(ctx: usize) {
        assert_eq!(unsafe { cuCtxSetCurrent(ctx as CUcontext) }, 0);
    }

    fn context_of_stream(s: CUstream) -> usize {
        let mut ctx: CUcontext = std::ptr::null_mut();
        assert_eq!(unsafe { cuStreamGetCtx(s, &mut ctx) }, 0);
        ctx as usize
    }

    #[test]
    fn each_context_has_its_own_legacy_stream_and_streams() {
        let _serial = serial();
        let one = context_of(1);
        enter(CONTEXT0);
        let (p, q) = (managed(64), managed(64));
        let s0 = stream(0);
        assert_eq!(context_of_stream(STREAM_LEGACY), CONTEXT0);
        assert_eq!(context_of_stream(s0), CONTEXT0);
        // Device 0's legacy stream held busy behind a blocking stream of device 0.
        let go = busy(s0);
        assert_eq!(fill(p, STREAM_LEGACY), 0);
        assert_eq!(unsafe { cuStreamQuery(STREAM_LEGACY) }, 600);
        // Device 1's legacy stream, and a whole-device wait of device 1, are not behind it: on
        // another thread, so that a model that made them one stream fails instead of hanging.
        let (tx, rx) = channel();
        let other = std::thread::spawn(move || {
            enter(one);
            let legacy_ctx = context_of_stream(STREAM_LEGACY);
            let s1 = stream(0);
            let s1_ctx = context_of_stream(s1);
            let filled = fill(q, STREAM_LEGACY);
            let synced = unsafe { cuStreamSynchronize(STREAM_LEGACY) };
            let device = unsafe { cuCtxSynchronize() };
            let destroyed = unsafe { cuStreamDestroy_v2(s1) };
            let _ = tx.send((legacy_ctx, s1_ctx, filled, synced, device, destroyed));
        });
        let got = rx.recv_timeout(Duration::from_secs(30));
        drop(go);
        let _ = other.join();
        assert_eq!(
            got,
            Ok((one, one, 0, 0, 0, 0)),
            "device 1 waited for device 0"
        );
        assert_eq!(unsafe { cuCtxSynchronize() }, 0);
        unsafe {
            assert_eq!(cuMemFree_v2(p), 0);
            assert_eq!(cuMemFree_v2(q), 0);
            assert_eq!(cuStreamDestroy_v2(s0), 0);
        }
    }

    fn event() -> CUevent {
        let mut e: CUevent = std::ptr::null_mut();
        assert_eq!(unsafe { cuEventCreate(&mut e, 0) }, 0);
        e
    }

    #[test]
    fn an_event_is_recorded_on_its_own_context_and_timed_against_its_own_context() {
        let _serial = serial();
        enter(CONTEXT0);
        let (e0, f0, s0) = (event(), event(), stream(0));
        enter(context_of(1));
        let (e1, s1) = (event(), stream(0));
        unsafe {
            assert_eq!(
                cuEventRecord(e0, s1),
                400,
                "an event of device 0 on device 1"
            );
            assert_eq!(cuEventRecord(e1, s1), 0);
            // A wait across devices is allowed.
            assert_eq!(cuStreamWaitEvent(s0, e1, 0), 0);
            assert_eq!(cuEventSynchronize(e1), 0);
        }
        enter(CONTEXT0);
        let mut ms = 0.0f32;
        unsafe {
            assert_eq!(cuEventRecord(e0, s0), 0);
            assert_eq!(cuEventRecord(f0, s0), 0);
            assert_eq!(cuStreamSynchronize(s0), 0);
            assert_eq!(cuEventElapsedTime(&mut ms, e0, e1), 400, "two contexts");
            assert_eq!(cuEventElapsedTime(&mut ms, e0, f0), 0, "one context");
            for e in [e0, f0, e1] {
                assert_eq!(cuEventDestroy_v2(e), 0);
            }
            assert_eq!(cuStreamDestroy_v2(s0), 0);
            assert_eq!(cuStreamDestroy_v2(s1), 0);
        }
    }

    #[test]
    fn a_kernel_of_one_device_on_device_memory_of_another_is_a_violation() {
        let _serial = serial();
        enter(CONTEXT0);
        let mut p = 0;
        assert_eq!(unsafe { cuMemAlloc_v2(&mut p, 64) }, 0);
        let shared = managed(64);
        let ptx = c".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry empty(\n\
            .param .u64 p0\n)\n{\nret;\n}\n";
        let (mut module, mut function) = (std::ptr::null_mut(), std::ptr::null_mut());
        unsafe {
            assert_eq!(cuModuleLoadData(&mut module, ptx.as_ptr().cast()), 0);
            assert_eq!(
                cuModuleGetFunction(&mut function, module, c"empty".as_ptr()),
                0
            );
        }
        let launch = |s: CUstream, mut address: u64| {
            let mut params: [*mut c_void; 1] = [(&raw mut address).cast()];
            unsafe {
                cuLaunchKernel(
                    function,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    s,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
        };
        let s0 = stream(0);
        assert_eq!(violation_of(|| assert_eq!(launch(s0, p), 0)), None);
        assert_eq!(unsafe { cuStreamSynchronize(s0) }, 0);
        enter(context_of(1));
        let s1 = stream(0);
        // Managed memory is every device's.
        assert_eq!(violation_of(|| assert_eq!(launch(s1, shared), 0)), None);
        assert_eq!(unsafe { cuStreamSynchronize(s1) }, 0);
        let seen = violation_of(|| {
            launch(s1, p);
        });
        assert!(
            seen.as_deref()
                .is_some_and(|v| v.contains("another device's")),
            "{seen:?}"
        );
        enter(CONTEXT0);
        unsafe {
            assert_eq!(cuMemFree_v2(p), 0);
            assert_eq!(cuMemFree_v2(shared), 0);
            assert_eq!(cuStreamDestroy_v2(s0), 0);
            assert_eq!(cuStreamDestroy_v2(s1), 0);
            assert_eq!(cuModuleUnload(module), 0);
        }
    }
}
