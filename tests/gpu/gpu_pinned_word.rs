//! A pinned word (`um::PinnedWord`): a few bytes of page-locked host memory that device work
//! writes and the host reads once it has waited for that work (where `um-cublas` has its
//! reductions to the host write their result). It is zeroed when made, holds what is written
//! into it at its start, lies at an address aligned for any value it can hold, and is freed by
//! its drop where the driver accepts the free: at once, on another thread, and, dropped inside a
//! capture closure, once the capture has ended (the capture stays valid).

use crate::common;

use common::{allocation_at, gpu, serial};
use um::{Managed, PINNED_WORD_BYTES, PinnedWord, StreamOptions};
use um_test_kernels::testing::add_scalar;

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
