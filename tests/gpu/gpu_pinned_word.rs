//! A pinned word (`um::PinnedWord`): a few bytes of page-locked host memory that device work
//! writes and the host reads once it has waited for that work (where `um-cublas` has its
//! reductions to the host write their result). It is zeroed when made, holds what is written
//! into it at its start, lies at an address aligned for any value it can hold, and is freed by
//! its drop where the driver accepts the free: at once, on another thread, and, dropped inside a
//! capture closure, once the capture has ended (the capture stays valid).

use crate::common;

use common::waker::run_in_callback;
use common::{allocation_at, gpu, serial, watchdog};
use um::{Managed, PINNED_WORD_BYTES, PinnedWord, StreamOptions};
use um_test_kernels::testing::add_scalar;

use std::sync::Mutex;

/// The word's allocation as the driver knows it: `PINNED_WORD_BYTES` bytes starting at its
/// address.
fn allocated(word: &PinnedWord) -> Option<(u64, usize)> {
    allocation_at(word.as_device_ptr::<u8>() as u64)
}

/// Zeroed when made (each of its 16 bytes), it holds what is written at its start, read back
/// as the same type; its address is aligned for any value that fits (to 16 bytes at least);
/// the driver knows it as an allocation of exactly its size until it is dropped, on this
/// thread or another.
#[test]
#[ignore = "needs a CUDA device"]
fn a_pinned_word_is_zeroed_holds_what_is_written_and_is_freed_by_its_drop_on_any_thread() {
    let _serial = serial();
    let ctx = gpu();
    let word = PinnedWord::new(&ctx).expect("a pinned word");
    let address = word.as_device_ptr::<u8>() as u64;
    assert_eq!(
        address % PINNED_WORD_BYTES as u64,
        0,
        "aligned for any value it holds"
    );
    assert_eq!(allocated(&word), Some((address, PINNED_WORD_BYTES)));
    // SAFETY: no device work was handed the word.
    assert_eq!(unsafe { word.read::<[u8; PINNED_WORD_BYTES]>() }, [0; 16]);
    for value in [1.5f64, -0.0, f64::MAX] {
        // SAFETY: as above.
        unsafe { word.write(value) };
        // SAFETY: as above.
        assert_eq!(unsafe { word.read::<f64>() }.to_bits(), value.to_bits());
    }
    // SAFETY: as above.
    unsafe { word.write(-7i32) };
    // SAFETY: as above.
    assert_eq!(unsafe { word.read::<i32>() }, -7);
    drop(word);
    assert_eq!(allocation_at(address), None, "freed by its drop");

    let word = PinnedWord::new(&ctx).expect("a second pinned word");
    let address = word.as_device_ptr::<u8>() as u64;
    std::thread::spawn(move || drop(word))
        .join()
        .expect("the dropping thread");
    assert_eq!(
        allocation_at(address),
        None,
        "freed by a drop on another thread"
    );
}

/// Dropped inside a capture closure (where the driver refuses a free, and the refusal would
/// invalidate the capture), the word is still allocated when the drop returns, freed once the
/// capture has ended, and the graph the capture made replays.
#[test]
#[ignore = "needs a CUDA device"]
fn a_pinned_word_dropped_inside_a_capture_closure_is_freed_once_the_capture_ends() {
    let _serial = serial();
    let ctx = gpu();
    let word = PinnedWord::new(&ctx).expect("a pinned word");
    let address = word.as_device_ptr::<u8>() as u64;
    // Device memory enters a graph whether or not the device has concurrent managed access.
    let x = Managed::from_slice_device(&ctx, &[1.0f32; 1000]).expect("x");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, during) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                drop(word);
                let during = allocation_at(address);
                Ok(((x,), during))
            })?;
            assert_eq!(
                during,
                Some((address, PINNED_WORD_BYTES)),
                "not freed inside the capture closure"
            );
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            Ok(x)
        })
        .expect("the capture and its replay");
    let x = x.to_vec().expect("x back on the host");
    assert!(x.iter().all(|&v| v == 2.0), "the graph replayed its kernel");
    assert_eq!(allocation_at(address), None, "freed once the capture ended");
}

/// Any value that fits is held at its own alignment and read back bit for bit: an empty type
/// (`()`, `[u8; 0]`), a `u128` (16 bytes, aligned to 16), a `[u8; 16]`, a `[f32; 4]`. A write
/// writes only its own bytes: after a `u128`, an `f32` written at the start leaves the other 12
/// bytes as they were (so a library that zeroes the word before device work zeroes, and reads,
/// the same type).
#[test]
#[ignore = "needs a CUDA device"]
fn a_pinned_word_holds_any_value_that_fits_and_a_write_changes_only_its_own_bytes() {
    let _serial = serial();
    let ctx = gpu();
    let word = PinnedWord::new(&ctx).expect("a pinned word");
    let address = word.as_device_ptr::<u8>() as usize;
    assert_eq!(
        word.as_device_ptr::<()>() as usize,
        address,
        "a ZST at the start"
    );
    assert_eq!(
        word.as_device_ptr::<u128>() as usize % align_of::<u128>(),
        0
    );
    assert!(word.context().same_as(&ctx), "the word's context");
    let all = u128::from_le_bytes(std::array::from_fn(|i| i as u8 + 1));
    // SAFETY: no device work was ever handed the word.
    unsafe {
        word.write(());
        word.read::<()>();
        word.write::<[u8; 0]>([]);
        assert_eq!(word.read::<[u8; 0]>(), []);
        word.write(all);
        assert_eq!(word.read::<u128>(), all);
        assert_eq!(word.read::<[u8; 16]>(), all.to_le_bytes());
        word.write(2.5f32);
        let mut expected = all.to_le_bytes();
        expected[..4].copy_from_slice(&2.5f32.to_le_bytes());
        assert_eq!(
            word.read::<[u8; 16]>(),
            expected,
            "only the f32's 4 bytes changed"
        );
        assert_eq!(word.read::<f32>(), 2.5);
        word.write([1.0f32, 2.0, 3.0, 4.0]);
        assert_eq!(word.read::<[f32; 4]>(), [1.0, 2.0, 3.0, 4.0]);
    }
    drop(word);
    assert_eq!(allocation_at(address as u64), None, "freed by its drop");
}

/// `leak` gives the word up unfreed (for a word that device work may still write): the driver
/// still knows its allocation afterwards, and nothing frees it later (not the reaper either).
#[test]
#[ignore = "needs a CUDA device"]
fn a_pinned_word_given_up_with_leak_is_never_freed_and_leaks_it() {
    let _serial = serial();
    let ctx = gpu();
    let word = PinnedWord::new(&ctx).expect("a pinned word");
    let address = word.as_device_ptr::<u8>() as u64;
    word.leak();
    um::reap_pending();
    ctx.wait_idle().expect("wait");
    assert_eq!(
        allocation_at(address),
        Some((address, PINNED_WORD_BYTES)),
        "still allocated after leak"
    );
}

/// Inside um's stream callback (a waker), where no CUDA call may be made: a new word is refused
/// with `InsideDriverCallback` before any driver call, and a word dropped there is not freed
/// there but handed to the reaper thread, which frees it (the driver no longer knows it once
/// `reap_pending` returns). A hang would end in the watchdog.
#[test]
#[ignore = "needs a CUDA device"]
fn a_pinned_word_inside_a_stream_callback_is_refused_when_made_and_freed_by_the_reaper_when_dropped()
 {
    let _serial = serial();
    let _dog = watchdog("a pinned word inside a stream callback");
    let ctx = gpu();
    let word = PinnedWord::new(&ctx).expect("a pinned word");
    let address = word.as_device_ptr::<u8>() as u64;
    let held = Mutex::new(Some(word));
    let ctx2 = ctx.clone();
    let out = run_in_callback(&ctx, move || {
        let made = PinnedWord::new(&ctx2).map(drop);
        drop(held.lock().map(|mut w| w.take()));
        let still = allocation_at(address).is_some();
        format!("new: {made:?}; allocated after the drop inside the callback: {still}")
    });
    assert!(
        out.contains("InsideDriverCallback"),
        "a word made inside the callback is refused: {out}"
    );
    um::reap_pending();
    assert_eq!(allocation_at(address), None, "freed by the reaper: {out}");
    common::assert_context_usable(&ctx);
}

/// While another thread's capture is open (its closure waits for this thread), a word made and
/// dropped here is allocated and freed at once (`cuMemAllocHost`, `cuMemFreeHost` on a thread
/// that does not capture: um's captures are thread-local), and the capture stays valid: its
/// graph replays.
#[test]
#[ignore = "needs a CUDA device"]
fn a_pinned_word_made_and_dropped_beside_another_threads_capture_leaves_the_capture_valid() {
    let _serial = serial();
    let _dog = watchdog("a pinned word beside a capture");
    let ctx = gpu();
    let (freed, replayed) = common::beside_an_open_capture(&ctx, || {
        PinnedWord::new(&ctx).map(|word| {
            let address = word.as_device_ptr::<u8>() as u64;
            drop(word);
            allocation_at(address)
        })
    });
    assert_eq!(
        freed.expect("a word made beside the capture"),
        None,
        "freed at once"
    );
    assert!(
        replayed.expect("the capture and its replay"),
        "the graph replayed both kernels"
    );
}
