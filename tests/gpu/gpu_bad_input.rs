//! Bad input on a real GPU: each is a clear `Err`, checked before or by the driver. The
//! token-free methods of `Storage` reached through a bound, even with forged parts, compute and
//! check only.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use common::gpu;
use um::{Context, Error, Managed, Storage, StreamOptions};

#[test]
#[ignore = "needs a CUDA device"]
fn ptx_the_driver_cannot_parse_is_an_error() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let err = ctx.load_ptx("this is not PTX").expect_err("garbage PTX");
    println!("{err}");
    assert!(err.to_string().contains("cuModuleLoadData"), "{err}");
}

#[test]
#[ignore = "needs a CUDA device"]
fn ptx_newer_than_the_driver_names_both_versions() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let ptx = ".version 99.9\n.target sm_75\n.address_size 64\n.visible .entry k() { ret; }\n";
    let err = ctx.load_ptx(ptx).expect_err("an ISA no driver knows");
    println!("{err}");
    match &err {
        Error::PtxUnsupported {
            ptx_isa,
            driver_major,
            ..
        } => {
            assert_eq!(ptx_isa, "99.9");
            assert!(*driver_major >= 12);
        }
        // Some drivers reject an unknown version as an invalid image instead; that is still a
        // named driver error.
        Error::Driver { name, .. } => assert!(name.starts_with("CUDA_ERROR_"), "{err}"),
        other => panic!("unexpected error: {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_missing_kernel_is_an_error() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let err = ctx
        .load_ptx(um_test_kernels::testing::PTX)
        .and_then(|m| m.kernel("no_such_kernel"))
        .expect_err("no such entry");
    assert!(
        matches!(
            &err,
            Error::Driver {
                call: "cuModuleGetFunction",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn an_invalid_device_index_is_an_error() {
    let _serial = crate::common::serial();
    let err = Context::new(1_000).expect_err("no device 1000");
    assert!(
        matches!(err, Error::InvalidDevice { ordinal: 1_000, .. }),
        "{err}"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn zero_length_overflow_and_oversubscription_are_refused() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    assert!(matches!(
        Managed::<[f32]>::zeroed_slice(&ctx, 0),
        Err(Error::ZeroSized { .. })
    ));
    assert!(matches!(
        Managed::<[u64]>::zeroed_slice(&ctx, usize::MAX / 2),
        Err(Error::SizeOverflow { .. })
    ));
    let (free, _) = ctx.mem_info().expect("mem info");
    let err = Managed::<[u8]>::zeroed_slice(&ctx, free + (1 << 30)).expect_err("more than free");
    assert!(matches!(err, Error::WouldOversubscribe { .. }), "{err}");
    // (The opt-in, `allow_oversubscription`, is not exercised here: it would allocate more
    // than the shared GPU has free. Its guard is unit-tested without a GPU.)
}

#[test]
#[ignore = "needs a CUDA device"]
fn two_handles_of_one_device_share_its_context() {
    let _serial = crate::common::serial();
    let a = gpu();
    let b = Context::new(0).expect("second handle");
    assert!(a.same_as(&b), "both retain device 0's primary context");
    // Memory of one handle attaches to a stream of the other: no ContextMismatch.
    let data = Managed::from_slice(&a, &[1.0f32; 8]).expect("alloc");
    let data = b
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            um_test_kernels::testing::add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("same context");
    assert!(data.iter().all(|v| *v == 2.0));
}

/// `#[repr(C, align(8192))]` needs no `unsafe` (`#[derive(DeviceCopy)]`), and managed memory is
/// aligned to 256 bytes only: `Managed::new` returned a misaligned `&Page` in 60 allocations of 64
/// on an H200. Every constructor of every storage now refuses a type aligned above 256 bytes before
/// it allocates.
#[test]
#[ignore = "needs a CUDA device"]
fn element_types_aligned_above_256_bytes_are_refused_by_every_constructor() {
    let _serial = crate::common::serial();
    #[derive(Clone, Copy, Debug, um::DeviceCopy)]
    #[repr(C, align(8192))]
    struct Page([u8; 16]);
    // SAFETY: plain bytes; all-zero is a valid value.
    unsafe impl um::Zeroable for Page {}
    let ctx = gpu();
    let want = Error::OverAligned {
        align: 8192,
        max: 256,
    };
    let page = Page([1; 16]);
    let results: Vec<(&str, Result<(), Error>)> = vec![
        ("new", Managed::new(&ctx, page).map(drop)),
        ("zeroed", Managed::<Page>::zeroed(&ctx).map(drop)),
        ("from_fn", Managed::from_fn(&ctx, 4, |_| page).map(drop)),
        (
            "from_slice",
            Managed::from_slice(&ctx, &[page; 4]).map(drop),
        ),
        (
            "from_iter_in",
            Managed::from_iter_in(&ctx, [page; 3]).map(drop),
        ),
        (
            "zeroed_slice",
            Managed::<[Page]>::zeroed_slice(&ctx, 4).map(drop),
        ),
        ("new_mirrored", Managed::new_mirrored(&ctx, page).map(drop)),
        (
            "zeroed_mirrored",
            Managed::<Page, _, um::Mirror>::zeroed_mirrored(&ctx).map(drop),
        ),
        (
            "from_fn_mirrored",
            Managed::from_fn_mirrored(&ctx, 4, |_| page).map(drop),
        ),
        (
            "from_slice_mirrored",
            Managed::from_slice_mirrored(&ctx, &[page; 4]).map(drop),
        ),
        (
            "zeroed_slice_mirrored",
            Managed::<[Page], _, um::Mirror>::zeroed_slice_mirrored(&ctx, 4).map(drop),
        ),
        ("new_coherent", Managed::new_coherent(&ctx, page).map(drop)),
        (
            "zeroed_coherent",
            Managed::<Page, _, um::Coherent>::zeroed_coherent(&ctx).map(drop),
        ),
        (
            "from_fn_coherent",
            Managed::from_fn_coherent(&ctx, 4, |_| page).map(drop),
        ),
        (
            "from_slice_coherent",
            Managed::from_slice_coherent(&ctx, &[page; 4]).map(drop),
        ),
        (
            "zeroed_slice_coherent",
            Managed::<[Page], _, um::Coherent>::zeroed_slice_coherent(&ctx, 4).map(drop),
        ),
    ];
    for (constructor, got) in results {
        assert_eq!(got, Err(want.clone()), "{constructor}");
    }
}

/// The largest alignment that is accepted is honoured by every storage, every time.
#[test]
#[ignore = "needs a CUDA device"]
fn element_types_aligned_to_256_bytes_are_always_aligned() {
    let _serial = crate::common::serial();
    #[derive(Clone, Copy, Debug, PartialEq, um::DeviceCopy)]
    #[repr(C, align(256))]
    struct Line([u32; 4]);
    let ctx = gpu();
    let aligned = |p: *const Line| (p as usize) % 256 == 0;
    for i in 0..64u32 {
        let line = Line([i; 4]);
        let unified = Managed::new(&ctx, line).expect("unified");
        let mirrored = Managed::new_mirrored(&ctx, line).expect("mirrored");
        let slice = Managed::from_fn(&ctx, 3, |_| line).expect("slice");
        assert!(aligned(&*unified) && aligned(&*mirrored), "allocation {i}");
        assert!(
            slice.iter().all(|l| aligned(l) && *l == line),
            "allocation {i}"
        );
        if ctx.info().concurrent_managed_access {
            let coherent = Managed::new_coherent(&ctx, line).expect("coherent");
            assert!(aligned(&*coherent) && *coherent == line, "allocation {i}");
        }
    }
}

/// Sizes and alignment (oversubscribed requests are not made here: no request is ever larger than
/// the GPU's free memory).
#[test]
#[ignore = "needs a CUDA device"]
fn sizes_and_alignments_are_refused_before_the_driver() {
    let _serial = crate::common::serial();
    #[derive(Clone, Copy, um::DeviceCopy)]
    #[repr(C, align(512))]
    struct Over([u8; 512]);
    let ctx = gpu();
    assert!(matches!(
        Managed::<[()]>::from_fn(&ctx, 10, |_| ()),
        Err(Error::ZeroSized { .. })
    ));
    assert!(matches!(
        Managed::<[u64]>::zeroed_slice(&ctx, usize::MAX / 4),
        Err(Error::SizeOverflow { .. })
    ));
    for got in [
        Managed::new(&ctx, Over([0; 512])).map(drop),
        Managed::new_mirrored(&ctx, Over([0; 512])).map(drop),
    ] {
        assert_eq!(
            got,
            Err(Error::OverAligned {
                align: 512,
                max: 256
            })
        );
    }
}

/// The token-free methods of `Storage`'s supertrait, reached through a bound, compute and check
/// only; even a forged part reaches nothing.
#[test]
#[ignore = "needs a CUDA device"]
fn the_storage_methods_without_a_token_act_on_nothing() {
    let _serial = crate::common::serial();
    fn poke<M: Storage>(ctx: &Context, parts: &M::Parts) -> um::Result<()> {
        M::admit(ctx)?;
        assert_eq!(M::footprint(4096) % 4096, 0);
        M::check_hand_off(ctx, ctx, ctx)?;
        let _address = M::device_ptr(std::ptr::NonNull::<u8>::dangling(), parts);
        Ok(())
    }
    fn forge<M: Storage>(ctx: &Context) -> um::Result<()>
    where
        M::Parts: Default,
    {
        poke::<M>(ctx, &M::Parts::default())
    }
    let ctx = gpu();
    forge::<um::Unified>(&ctx).expect("computes and checks only");
}
