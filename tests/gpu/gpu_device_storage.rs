//! Device memory (`Managed<T, S, Device>`: `cuMemAlloc` alone, no host side) on a real GPU:
//! copies in and out at odd lengths and element sizes, each waited for and each length checked
//! (a refused copy touches nothing); a round trip through um-kernels' kernels against the CPU,
//! the host's passes made by copies; a handoff between two streams ordered by the event alone;
//! no driver call of the storage's own at any transition, under every transfer policy; a drop
//! with a kernel in flight waits for it and frees; the copies refused inside a capture closure,
//! which stays valid; device memory in a graph on a context without concurrent managed access;
//! the async wait; copies whose other side is managed memory, complete when they return; copies
//! after a `sync` that see the last kernel while another stream still runs, and kernels after a
//! copy in that see it; requests no allocation can meet (no bytes, too many, over-aligned, more
//! than the GPU has), each an `Err` that leaves the context usable.
//!
//! The CPU cannot read a device buffer in place in any state (`ui/device_storage/*`): every
//! check here reads through `to_vec` or `copy_to_host`. Stream A runs `spin_then_add`, which
//! takes at least `SPIN_NS` of GPU time before it writes: a stream not ordered after it would
//! read the buffer before the write, and the exact results would show it. No assertion depends
//! on timing.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use common::{assert_context_usable, counts_free_memory, gpu, serial, workload};
use pollster::block_on;
use um::{
    CoherentManaged, Context, ContextOptions, DeviceManaged, Error, ErrorKind, HostOwned, Managed,
    MirroredManaged, StreamOptions, Transfer,
};
use um_test_kernels::testing::{add_scalar, axpy, spin_then_add};

/// GPU time `spin_then_add` takes at least, where a test needs a stream to be busy.
const SPIN_NS: u64 = 50_000_000;

/// The first element of `v` that is not `want(i)`, with its index.
fn first_wrong(v: &[f32], want: impl Fn(usize) -> f32) -> Option<(usize, f32, f32)> {
    v.iter()
        .enumerate()
        .find(|(i, x)| **x != want(*i))
        .map(|(i, x)| (i, *x, want(i)))
}

/// The contents of a device buffer, by a copy that waits.
fn contents<T: um::DeviceCopy>(buf: &DeviceManaged<[T]>) -> Vec<T> {
    buf.to_vec().expect("copy to the host")
}

#[test]
#[ignore = "needs a CUDA device"]
fn copies_in_and_out_round_trip_at_odd_lengths() {
    let _serial = serial();
    let ctx = gpu();
    for len in [1usize, 3, 4097, workload(1 << 20, 1 << 12) + 7] {
        let data: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
        let mut d = Managed::from_slice_device(&ctx, &data).expect("from_slice_device");
        assert_eq!(d.len(), len);
        assert_eq!(d.size_in_bytes(), 4 * len);
        assert_eq!(
            d.footprint_in_bytes(),
            4 * len,
            "one allocation, no host half"
        );
        assert_eq!(
            contents(&d),
            data,
            "from_slice_device then to_vec, len {len}"
        );
        let mut out = vec![f32::NAN; len];
        d.copy_to_host(&mut out).expect("copy_to_host");
        assert_eq!(out, data, "copy_to_host, len {len}");
        let other: Vec<f32> = (0..len).map(|i| (len - i) as f32).collect();
        d.copy_from_host(&other).expect("copy_from_host");
        assert_eq!(contents(&d), other, "copy_from_host then to_vec, len {len}");
        let z = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, len).expect("zeroed");
        assert_eq!(
            first_wrong(&contents(&z), |_| 0.0),
            None,
            "zeroed, len {len}"
        );
        // One-byte elements: an allocation whose size is no multiple of 4.
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let b = Managed::from_slice_device(&ctx, &bytes).expect("bytes");
        assert_eq!(contents(&b), bytes, "u8, len {len}");
        // Pinned host memory (a host-owned mirror) on either side of a copy.
        let mut pinned = MirroredManaged::<[f32]>::zeroed_slice_mirrored(&ctx, len).expect("pin");
        d.copy_to_host(&mut pinned).expect("copy to pinned memory");
        assert_eq!(&pinned[..], &other[..], "to pinned, len {len}");
        pinned.iter_mut().for_each(|v| *v += 1.0);
        d.copy_from_host(&pinned).expect("copy from pinned memory");
        assert_eq!(first_wrong(&contents(&d), |i| (len - i) as f32 + 1.0), None);
    }
    let empty: &[f32] = &[];
    assert!(matches!(
        DeviceManaged::<[f32]>::from_slice_device(&ctx, empty),
        Err(Error::ZeroSized { len: 0, .. })
    ));
    assert!(matches!(
        DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, 0),
        Err(Error::ZeroSized { len: 0, .. })
    ));
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_copy_of_another_length_is_refused_and_touches_nothing() {
    let _serial = serial();
    let ctx = gpu();
    let data = [1.0f32, 2.0, 3.0, 4.0, 5.0];
    let mut d = Managed::from_slice_device(&ctx, &data).expect("alloc");
    for wrong in [0, 1, 4, 6, 1000] {
        let src = vec![9.0f32; wrong];
        assert_eq!(
            d.copy_from_host(&src),
            Err(Error::HostCopyLength {
                what: "copy_from_host",
                buffer: 5,
                host: wrong
            })
        );
        let mut dst = vec![7.0f32; wrong];
        assert_eq!(
            d.copy_to_host(&mut dst),
            Err(Error::HostCopyLength {
                what: "copy_to_host",
                buffer: 5,
                host: wrong
            })
        );
        assert!(
            dst.iter().all(|v| *v == 7.0),
            "a refused copy wrote {dst:?}"
        );
    }
    assert_eq!(contents(&d), data, "a refused copy wrote the buffer");
}

/// Seed 000's loop (transform on the GPU, a pass on the host, convert on the GPU, five times) in
/// device memory, with um-kernels' own kernels; the host's pass copies out, changes and copies
/// back. Exact against the CPU.
#[test]
#[ignore = "needs a CUDA device"]
fn a_round_trip_through_um_kernels_matches_the_cpu() {
    use um::kernels::run_task;
    let _serial = serial();
    let ctx = gpu();
    let n = workload(1 << 20, 4097) + 3;
    let input: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.25).collect();
    let (mut data_cpu, mut out_cpu) = (vec![0.0f32; n], vec![0.0f32; n]);
    let inp = Managed::from_slice_device(&ctx, &input).expect("alloc input");
    let mut data = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, n).expect("alloc data");
    let out = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, n).expect("alloc out");
    let (inp, data, out) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (inp, mut out) = (inp.attach(s)?, out.attach(s)?);
            for _ in 0..5 {
                let mut dev = data.attach(s)?;
                run_task::transform(s, &inp, &mut dev)?;
                let mut host = dev.sync()?;
                let mut pass = host.to_vec()?;
                pass.iter_mut().for_each(|v| *v -= 1.0);
                host.copy_from_host(&pass)?;
                let dev = host.attach(s)?;
                run_task::convert(s, &mut out, &dev)?;
                data = dev.sync()?;
            }
            let (inp, out) = s.sync_all((inp, out))?;
            Ok((inp, data, out))
        })
        .expect("stream work");
    for _ in 0..5 {
        for i in 0..n {
            data_cpu[i] = 2.0 * input[i] + data_cpu[i] - 1.0;
            out_cpu[i] = 0.5 * data_cpu[i];
        }
    }
    assert_eq!(contents(&inp), input, "the kernels only read the input");
    assert_eq!(first_wrong(&contents(&data), |i| data_cpu[i]), None);
    assert_eq!(first_wrong(&contents(&out), |i| out_cpu[i]), None);
}

/// A → B between two non-blocking streams: B's kernel reads what A's long kernel wrote, with
/// no host wait and no association call (device memory has none): the event orders them.
#[test]
#[ignore = "needs a CUDA device"]
fn a_hand_off_between_two_streams_is_ordered_by_the_event_alone() {
    let _serial = serial();
    let ctx = gpu();
    let n = workload(1 << 20, 1 << 12);
    let x = Managed::from_slice_device(&ctx, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
        .expect("alloc x");
    let y = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, n).expect("alloc y");
    let non_blocking = StreamOptions::new().non_blocking();
    let attaches = um_core::attach_calls_on_this_thread();
    let (x, y) = ctx
        .with_stream(non_blocking, |a| {
            ctx.with_stream(non_blocking, |b| {
                let (mut x, mut y) = (x.attach(a)?, y.attach(b)?);
                spin_then_add(a, &mut x, 1.0, SPIN_NS)?; // x = i + 1, after SPIN_NS
                let mut x = x.hand_off(b)?; // B waits for A's event
                axpy(b, &x, &mut y, 1.0)?; // y = x, read on B
                add_scalar(b, &mut x, 2.0)?; // x = i + 3, written on B
                b.sync_all((x, y))
            })
        })
        .expect("A -> B");
    assert_eq!(
        um_core::attach_calls_on_this_thread(),
        attaches,
        "no association call"
    );
    assert_eq!(
        first_wrong(&contents(&y), |i| i as f32 + 1.0),
        None,
        "B read x before A's write reached it"
    );
    assert_eq!(first_wrong(&contents(&x), |i| i as f32 + 3.0), None);
}

/// `attach`, `sync`, `sync_all` and `hand_off` of device memory make no association, prefetch,
/// advice or copy, whatever the stream's transfer policy: the state machine's own steps are the
/// whole transition.
#[test]
#[ignore = "needs a CUDA device"]
fn device_transitions_make_no_driver_call_of_their_own() {
    let _serial = serial();
    let ctx = gpu();
    for transfer in [
        Transfer::OnDemand,
        Transfer::Prefetch,
        Transfer::HostResident,
    ] {
        let x = Managed::from_slice_device(&ctx, &[1.0f32; 4099]).expect("alloc");
        let (attaches, transfers, copies) = (
            um_core::attach_calls_on_this_thread(),
            um_core::transfer_calls_on_this_thread(),
            um_core::mirror_copies_on_this_thread(),
        );
        let options = StreamOptions::new().transfer(transfer);
        let x = ctx
            .with_stream(options, |a| {
                ctx.with_stream(options, |b| {
                    let mut x = x.attach(a)?;
                    add_scalar(a, &mut x, 1.0)?;
                    let x = x.sync()?.attach(a)?;
                    let mut x = x.hand_off(b)?;
                    add_scalar(b, &mut x, 1.0)?;
                    let (x,) = b.sync_all((x,))?;
                    Ok(x)
                })
            })
            .expect("transitions");
        assert_eq!(
            (
                um_core::attach_calls_on_this_thread(),
                um_core::transfer_calls_on_this_thread(),
                um_core::mirror_copies_on_this_thread(),
            ),
            (attaches, transfers, copies),
            "{transfer:?}"
        );
        assert_eq!(first_wrong(&contents(&x), |_| 3.0), None, "{transfer:?}");
    }
}

/// A stream-owned device buffer dropped while its kernel runs: the drop waits for the stream
/// (it is idle once the drop returns), then frees the memory, which comes back.
#[test]
#[ignore = "needs a CUDA device"]
fn dropping_a_device_buffer_in_flight_waits_for_its_kernel_and_frees_it() {
    let _serial = serial();
    let ctx = gpu();
    let n = workload(64 << 20, 1 << 20); // 256 MiB of f32 (4 MiB under the sanitizer)
    // Warm-up: the kernels' module is loaded (and what its launches reserve) before measuring.
    assert_context_usable(&ctx);
    let (before, _) = ctx.mem_info().expect("mem info");
    let held = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, n).expect("alloc");
    let (holding, _) = ctx.mem_info().expect("mem info");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = held.attach(s)?;
        spin_then_add(s, &mut x, 1.0, SPIN_NS)?;
        drop(x);
        assert!(s.is_idle()?, "the drop returned before the kernel ended");
        Ok(())
    })
    .expect("stream work");
    assert_context_usable(&ctx);
    if counts_free_memory() {
        let (after, _) = ctx.mem_info().expect("mem info");
        assert!(
            before - holding >= 4 * n,
            "the held buffer shows in free memory ({before} -> {holding})"
        );
        assert!(
            after + (8 << 20) >= before,
            "the buffer was not freed: {before} free before, {after} after"
        );
    }
}

/// Inside a capture closure, where the driver refuses copies and waits (and the refusal would
/// invalidate the capture), the copies and the constructors of device memory are refused
/// first, `InsideCapture`, with no driver call: the capture stays valid, and its graph replays
/// right on a device buffer of its set. Afterwards the same copies work.
#[test]
#[ignore = "needs a CUDA device"]
fn copies_are_refused_inside_a_capture_closure_which_stays_valid() {
    let _serial = serial();
    // Device memory enters graphs on every device (no association): no capability to ask.
    let ctx = gpu();
    let n = 4099;
    let mut held = Managed::from_slice_device(&ctx, &[5.0f32; 16]).expect("held");
    let x = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, n).expect("x");
    let (x, errors) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, errors) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                let mut out = [0.0f32; 16];
                let errors = vec![
                    held.to_vec().map(drop),
                    held.copy_to_host(&mut out),
                    held.copy_from_host(&[1.0; 16]),
                    DeviceManaged::<[f32]>::from_slice_device(&ctx, &[1.0]).map(drop),
                    DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, 1).map(drop),
                ];
                Ok(((x,), errors))
            })?;
            graph.launch(s)?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            Ok((x, errors))
        })
        .expect("a valid capture");
    for e in errors {
        assert!(
            matches!(e, Err(Error::InsideCapture { .. })),
            "refused first: {e:?}"
        );
    }
    assert_eq!(first_wrong(&contents(&x), |_| 2.0), None, "two replays");
    assert_eq!(contents(&held), [5.0; 16], "the refused copy wrote nothing");
    held.copy_from_host(&[6.0; 16])
        .expect("a copy after the capture");
    assert_eq!(contents(&held), [6.0; 16]);
}

/// Device memory has no stream association, so a graph may hold it where unified memory is
/// refused (a context without concurrent managed access, emulated), and its transitions make
/// no attach to the host there either.
#[test]
#[ignore = "needs a CUDA device"]
fn device_memory_enters_a_graph_without_concurrent_managed_access() {
    let _serial = serial();
    let ctx =
        Context::new_with_options(0, ContextOptions::new().emulate_no_concurrent_access(true))
            .unwrap_or_else(|e| panic!("this test needs a CUDA device: {e}"));
    assert!(!ctx.info().concurrent_managed_access);
    let x = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, 4099).expect("alloc");
    let host_attaches = um_core::host_attach_calls_on_this_thread();
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                Ok(((x,), ()))
            })?;
            for _ in 0..3 {
                graph.launch(s)?;
            }
            let (x,) = graph.sync()?;
            Ok(x)
        })
        .expect("a graph on device memory");
    assert_eq!(um_core::host_attach_calls_on_this_thread(), host_attaches);
    assert_eq!(first_wrong(&contents(&x), |_| 3.0), None);
}

/// `sync_async` gives a device buffer back to the host like any other: the wait is the
/// stream's, and nothing is copied.
#[test]
#[ignore = "needs a CUDA device"]
fn sync_async_gives_a_device_buffer_back() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_slice_device(&ctx, &[1.0f32; 4099]).expect("alloc");
    let x: Managed<[f32], HostOwned, um::Device> =
        block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
            let mut x = x.attach(s)?;
            spin_then_add(s, &mut x, 1.0, SPIN_NS)?;
            x.sync_async().await
        }))
        .expect("async wait");
    assert_eq!(first_wrong(&contents(&x), |_| 2.0), None);
}

/// The host side of a copy may be managed memory: the slice of a host-owned unified (or
/// coherent) buffer, which the driver may class as device memory, for which a copy alone does
/// not wait on the host. `copy_to_host` waits for its stream after the copy, so the CPU may read
/// every element as soon as it returns; and `copy_from_host` out of managed memory has reached
/// the device when it returns. The buffers are 256 MiB (4 MiB under the sanitizer), written
/// last by a kernel, and the end of the destination is read first: a copy still in flight
/// would leave it unwritten.
///
/// Expects: every element of each managed destination equal to what the kernel wrote (3.0),
/// read at once; the device buffer equal to the managed source (5.0) after `copy_from_host`.
/// Coherent memory is skipped, said, on a device without concurrent managed access.
#[test]
#[ignore = "needs a CUDA device"]
fn copies_between_device_and_managed_memory_are_complete_when_they_return() {
    let _serial = serial();
    let ctx = gpu();
    let n = workload(64 << 20, 1 << 20);
    let d = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, n).expect("alloc");
    let mut d = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = d.attach(s)?;
            add_scalar(s, &mut d, 3.0)?;
            d.sync()
        })
        .expect("stream work");
    let mut unified = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("unified");
    d.copy_to_host(&mut unified)
        .expect("copy into unified memory");
    assert_eq!(
        unified[n - 1],
        3.0,
        "the last element, read as the copy returned"
    );
    assert_eq!(first_wrong(&unified, |_| 3.0), None, "into unified memory");
    match CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, n) {
        Ok(mut coherent) => {
            d.copy_to_host(&mut coherent)
                .expect("copy into coherent memory");
            assert_eq!(
                coherent[n - 1],
                3.0,
                "the last element, read as the copy returned"
            );
            assert_eq!(
                first_wrong(&coherent, |_| 3.0),
                None,
                "into coherent memory"
            );
        }
        Err(Error::NeedsConcurrentManagedAccess { device }) => {
            println!("skipped: coherent memory needs concurrent managed access (device {device})");
        }
        Err(e) => panic!("coherent allocation: {e}"),
    }
    unified.iter_mut().for_each(|v| *v = 5.0);
    d.copy_from_host(&unified)
        .expect("copy out of unified memory");
    let back = contents(&d);
    assert_eq!(back[n - 1], 5.0);
    assert_eq!(first_wrong(&back, |_| 5.0), None, "out of unified memory");
}

/// A host copy is ordered after the buffer's last writer and before the kernels that follow
/// it, and waits for no other stream: stream A writes x after a long spin, `sync` gives it back
/// (a wait for A alone), `to_vec` reads it into pageable memory while stream B (non-blocking,
/// another buffer) still spins; `copy_from_host` writes it from pageable memory, and a kernel of
/// B, enqueued once the copy returned, reads it.
///
/// Expects: `to_vec` gives A's write (i + 1, never the i from before the spin); B's kernel reads
/// the copied values (y = 1 + 10 i); x holds what was copied in (10 i).
#[test]
#[ignore = "needs a CUDA device"]
fn host_copies_after_sync_see_the_last_kernel_and_kernels_after_them_see_the_copy() {
    let _serial = serial();
    let ctx = gpu();
    let n = workload(1 << 20, 1 << 12);
    let x = Managed::from_slice_device(&ctx, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
        .expect("alloc x");
    let y = DeviceManaged::<[f32]>::zeroed_slice_device(&ctx, n).expect("alloc y");
    let non_blocking = StreamOptions::new().non_blocking();
    let (read, x, y) = ctx
        .with_stream(non_blocking, |a| {
            ctx.with_stream(non_blocking, |b| {
                let (mut x, mut y) = (x.attach(a)?, y.attach(b)?);
                spin_then_add(b, &mut y, 1.0, 2 * SPIN_NS)?; // y = 1, B busy meanwhile
                spin_then_add(a, &mut x, 1.0, SPIN_NS)?; // x = i + 1, after SPIN_NS
                let mut x = x.sync()?; // waits for A only
                let read = x.to_vec()?;
                let tenfold: Vec<f32> = (0..n).map(|i| 10.0 * i as f32).collect();
                x.copy_from_host(&tenfold)?;
                let x = x.attach(b)?;
                axpy(b, &x, &mut y, 1.0)?; // y = 1 + 10 i, after the copy
                let (x, y) = b.sync_all((x, y))?;
                Ok((read, x, y))
            })
        })
        .expect("two streams");
    assert_eq!(
        first_wrong(&read, |i| i as f32 + 1.0),
        None,
        "the copy read before A's kernel wrote"
    );
    assert_eq!(
        first_wrong(&contents(&y), |i| 1.0 + 10.0 * i as f32),
        None,
        "B's kernel read before the copy in had reached the device"
    );
    assert_eq!(first_wrong(&contents(&x), |i| 10.0 * i as f32), None);
}

/// Requests no allocation can meet come back as `Err`s, and the context stays usable: no bytes
/// (an empty slice, a zero-sized element type at any length: `ZeroSized`), a size past
/// `usize` (`SizeOverflow`), an element aligned above 256 bytes (`OverAligned`), all before the
/// driver; more than the GPU has free (`WouldOversubscribe`, before the driver); and the same
/// with oversubscription allowed, which device memory cannot do (the driver's out-of-memory
/// error; nothing is paged, nothing hangs).
///
/// Expects: each refusal as named (the last two of kind `OutOfMemory`), and a probe kernel and a
/// small device buffer working afterwards.
#[test]
#[ignore = "needs a CUDA device"]
fn device_requests_no_allocation_can_meet_are_errs_and_leave_the_context_usable() {
    let _serial = serial();
    #[derive(Clone, Copy, um::DeviceCopy)]
    #[repr(C, align(512))]
    struct Over([u8; 16]);
    // SAFETY: plain bytes; all-zero is a valid value.
    unsafe impl um::Zeroable for Over {}
    let ctx = gpu();
    let no_bytes = [
        DeviceManaged::<[()]>::zeroed_slice_device(&ctx, 1 << 40).map(drop),
        Managed::from_slice_device(&ctx, &[(); 5]).map(drop),
        Managed::from_slice_device(&ctx, &[] as &[f32]).map(drop),
    ];
    for got in no_bytes {
        assert!(matches!(got, Err(Error::ZeroSized { .. })), "{got:?}");
    }
    let overflow = DeviceManaged::<[u64]>::zeroed_slice_device(&ctx, usize::MAX / 4).map(drop);
    assert!(
        matches!(overflow, Err(Error::SizeOverflow { .. })),
        "{overflow:?}"
    );
    for got in [
        DeviceManaged::<[Over]>::zeroed_slice_device(&ctx, 4).map(drop),
        Managed::from_slice_device(&ctx, &[Over([1; 16]); 2]).map(drop),
    ] {
        assert_eq!(
            got,
            Err(Error::OverAligned {
                align: 512,
                max: 256
            })
        );
    }
    let petabyte = 1usize << 50;
    let guarded = DeviceManaged::<[u8]>::zeroed_slice_device(&ctx, petabyte).map(drop);
    assert!(
        matches!(guarded, Err(Error::WouldOversubscribe { .. })),
        "{guarded:?}"
    );
    ctx.allow_oversubscription(true);
    let refused = DeviceManaged::<[u8]>::zeroed_slice_device(&ctx, petabyte).map(drop);
    ctx.allow_oversubscription(false);
    match refused {
        Err(e) => assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}"),
        Ok(()) => panic!("a petabyte of device memory was allocated"),
    }
    assert_context_usable(&ctx);
    let small = Managed::from_slice_device(&ctx, &[4.0f32; 7]).expect("a small buffer after");
    assert_eq!(contents(&small), [4.0; 7]);
}
