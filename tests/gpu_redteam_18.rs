//! The run-time attacks of issue 18's second red-team reading (`docs/redteam.md`, attempts 9
//! and 12-22), each as a test: every one must end in exact results, a clear `Err`, a leak or a
//! documented panic, never in undefined behaviour. Run them under compute-sanitizer too
//! (`run.sh --sanitize`).
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as Cx, Poll, Wake, Waker};

use common::{gpu, workload};
use um::kernels::testing;
use um::{Context, ContextOptions, Error, Managed, Storage, StreamOptions};

/// A kernel's time on the GPU: long outside the sanitizer, short under it.
fn spin_ns(full_ms: u64) -> u64 {
    if std::env::var_os("UM_SANITIZE").is_some() {
        5_000_000
    } else {
        full_ms * 1_000_000
    }
}

/// 9: streams of one stream set share a brand; owners are checked at run time.
#[test]
#[ignore = "needs a CUDA device"]
fn the_streams_of_a_set_are_told_apart_at_every_step() {
    let ctx = gpu();
    let a = Managed::from_slice(&ctx, &[1.0f32; 1024]).expect("alloc");
    let b = Managed::from_slice(&ctx, &[1.0f32; 1024]).expect("alloc");
    let got = ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let (mut a, b) = (a.attach(&s[0])?, b.attach(&s[1])?);
        assert_eq!(
            testing::add_scalar(&s[1], &mut a, 1.0),
            Err(Error::StreamMismatch { argument: 0 })
        );
        assert_eq!(
            testing::axpy(&s[0], &b, &mut a, 2.0),
            Err(Error::StreamMismatch { argument: 0 })
        );
        let mut a = a.hand_off(&s[1])?;
        assert_eq!(
            testing::add_scalar(&s[0], &mut a, 1.0),
            Err(Error::StreamMismatch { argument: 0 })
        );
        // The wrong stream of the set: refused, and both buffers dropped (each drop waits for
        // its own stream, then frees).
        s[0].sync_all((a, b)).map(drop)
    });
    assert_eq!(got, Err(Error::StreamMismatch { argument: 0 }));
}

/// 12: the token-free methods of `Storage`'s supertrait, reached through a bound, compute and
/// check only; even a forged part reaches nothing.
#[test]
#[ignore = "needs a CUDA device"]
fn the_storage_methods_without_a_token_act_on_nothing() {
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

/// 15: forgetting stream-owned memory with a kernel in flight, a pending sync future, or a
/// reference cycle of stream-owned buffers only leaks them; the scope ends and the stream is
/// destroyed while its work finishes.
#[test]
#[ignore = "needs a CUDA device"]
fn forgetting_stream_owned_memory_only_leaks_it() {
    struct Node<'s> {
        _buf: Managed<[f32], um::StreamOwned<'s>>,
        next: std::cell::RefCell<Option<std::rc::Rc<Node<'s>>>>,
    }
    let ctx = gpu();
    let (a, b, c) = (
        Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc"),
        Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc"),
        Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc"),
    );
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut a = a.attach(s)?;
        testing::spin_then_add(s, &mut a, 1.0, spin_ns(50))?;
        std::mem::forget(a);
        std::mem::forget(b.attach(s)?.sync_async());
        let n = std::rc::Rc::new(Node {
            _buf: c.attach(s)?,
            next: std::cell::RefCell::new(None),
        });
        *n.next.borrow_mut() = Some(std::rc::Rc::clone(&n));
        Ok(())
    })
    .expect("the scope ends");
    ctx.wait_idle()
        .expect("the context is usable after the leaks");
}

/// 16: an async scope cancelled at each await point (its memory goes to the reaper and is
/// freed after the stream), a leaked scope future, and a sync future polled after `Ready`
/// (a documented panic).
#[test]
#[ignore = "needs a CUDA device"]
fn async_cancellation_frees_nothing_in_use_and_a_forgotten_scope_leaks_it() {
    let ctx = gpu();
    let mut cx = Cx::from_waker(Waker::noop());
    for cancel_at in 0..3 {
        let n = workload(1 << 16, 1 << 10);
        let data = Managed::from_slice(&ctx, &vec![0.0f32; n]).expect("alloc");
        let other = Managed::from_slice(&ctx, &vec![0.0f32; n]).expect("alloc");
        let spin = spin_ns(100);
        let scope = ctx.with_stream_async(StreamOptions::new(), async move |s| {
            let mut d = data.attach(s)?;
            let o = other.attach(s)?;
            testing::spin_then_add(s, &mut d, 1.0, spin)?;
            let d = d.sync_async().await?;
            let o = o.sync_async().await?;
            std::future::pending::<()>().await;
            Ok((d, o))
        });
        let mut scope = Box::pin(scope);
        for _ in 0..=cancel_at {
            let _ = scope.as_mut().poll(&mut cx);
        }
        if cancel_at == 2 {
            std::mem::forget(scope);
        } else {
            drop(scope);
        }
    }
    um::reap_pending();
    assert_eq!(um::orphans_pending(), 0);
    let data = Managed::from_slice(&ctx, &[0.0f32; 16]).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut fut = pin!(data.attach(s)?.sync_async());
        let host = loop {
            if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                break r?;
            }
        };
        assert_eq!(host[0], 0.0);
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = fut.as_mut().poll(&mut cx);
        }));
        assert!(again.is_err(), "a poll after Ready panics, as documented");
        Ok(())
    })
    .expect("stream work");
}

/// 17: a user's waker runs on the driver's callback thread, where the driver may refuse any CUDA
/// call (`CUDA_ERROR_NOT_PERMITTED`): um returns a refusal as `Err`, and the sync future still
/// completes right. (A waker that waits for device work there could deadlock, which is not
/// memory-unsafe; it is not tried.)
#[test]
#[ignore = "needs a CUDA device"]
fn a_waker_that_calls_cuda_from_the_callback_gets_errors_not_ub() {
    struct Evil {
        ctx: Context,
        seen: std::sync::Mutex<Vec<bool>>,
    }
    impl Wake for Evil {
        fn wake(self: Arc<Self>) {
            let alloc = Managed::from_slice(&self.ctx, &[1u8]).map(drop);
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(alloc.is_err());
            }
        }
    }
    let ctx = gpu();
    let evil = Arc::new(Evil {
        ctx: ctx.clone(),
        seen: std::sync::Mutex::new(Vec::new()),
    });
    let data = Managed::from_slice(&ctx, &[0.0f32; 1024]).expect("alloc");
    let waker = Waker::from(Arc::clone(&evil));
    let mut cx = Cx::from_waker(&waker);
    let host = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            testing::spin_then_add(s, &mut d, 1.0, spin_ns(50))?;
            let mut fut = Box::pin(d.sync_async());
            let _ = fut.as_mut().poll(&mut cx);
            std::thread::sleep(std::time::Duration::from_millis(200));
            pollster::block_on(fut)
        })
        .expect("the future completes");
    assert!(host.iter().all(|v| *v == 1.0));
    let seen = evil.seen.lock().map(|s| s.clone()).unwrap_or_default();
    println!("allocations in the callback refused: {seen:?}");
    assert!(!seen.is_empty(), "the waker ran on the callback thread");
}

/// 18: two handles of one device, one emulating no concurrent access: each buffer follows its
/// own handle's mode; the results are exact.
#[test]
#[ignore = "needs a CUDA device"]
fn buffers_follow_their_own_handle_beside_an_emulating_one() {
    let real = gpu();
    let emu = Context::with_options(0, ContextOptions::new().emulate_no_concurrent_access(true))
        .expect("emulating handle");
    assert!(real.same_as(&emu));
    if !real.info().concurrent_managed_access {
        return;
    }
    let coherent = Managed::from_slice_coherent(&real, &[1.0f32; 1024]).expect("alloc");
    let unified = Managed::from_slice(&real, &[1.0f32; 1024]).expect("alloc");
    let (coherent, unified) = emu
        .with_stream(StreamOptions::new(), |s| {
            let (mut c, mut u) = (coherent.attach(s)?, unified.attach(s)?);
            testing::add_scalar(s, &mut c, 1.0)?;
            testing::add_scalar(s, &mut u, 1.0)?;
            s.sync_all((c, u))
        })
        .expect("stream work");
    assert!(coherent.iter().all(|v| *v == 2.0) && unified.iter().all(|v| *v == 2.0));
}

/// 19: sizes and alignment (the oversubscribed requests of the report are not made here: no
/// request is ever larger than the GPU's free memory).
#[test]
#[ignore = "needs a CUDA device"]
fn sizes_and_alignments_are_refused_before_the_driver() {
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

/// 20: the caches with PTX that is not the generated static: a leaked copy, a prefix at the
/// same address, a name inside a longer literal.
#[test]
#[ignore = "needs a CUDA device"]
fn the_caches_find_each_text_and_name_as_itself() {
    let ctx = gpu();
    let ptx: &'static str = testing::PTX;
    let copy: &'static str = String::leak(ptx.to_owned());
    ctx.load_ptx(copy).expect("a copy loads");
    let _ = ctx.load_ptx(&ptx[..ptx.len() / 2]);
    let name: &'static str = "add_scalar_and_more";
    let k = ctx.kernel(ptx, &name[..10]).expect("add_scalar");
    assert_eq!(k.name(), "add_scalar");
    let data = Managed::from_slice(&ctx, &[0.0f32; 64]).expect("alloc");
    let data = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            testing::add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("stream work");
    assert!(data.iter().all(|v| *v == 1.0));
}

/// 21: `hand_off` from an inner stream to an outer one whose scope outlives it (the inner
/// stream and its event are destroyed with the kernel still running); a panic with kernels in
/// flight on two streams; nested per-thread scopes (one stream, two brands).
#[test]
#[ignore = "needs a CUDA device"]
fn handoffs_across_scopes_and_panics_with_kernels_in_flight() {
    let ctx = gpu();
    let data = Managed::from_slice(&ctx, &[0.0f32; 1 << 16]).expect("alloc");
    let data = ctx
        .with_stream(StreamOptions::new().non_blocking(), |outer| {
            let d = ctx.with_stream(StreamOptions::new().non_blocking(), |inner| {
                let mut d = data.attach(inner)?;
                testing::spin_then_add(inner, &mut d, 1.0, spin_ns(100))?;
                d.hand_off(outer)
            })?;
            d.sync()
        })
        .expect("stream work");
    assert!(data.iter().all(|v| *v == 1.0));

    let (a, b) = (
        Managed::from_slice(&ctx, &[0.0f32; 1024]).expect("alloc"),
        Managed::from_slice(&ctx, &[0.0f32; 1024]).expect("alloc"),
    );
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = ctx.with_stream(StreamOptions::new(), |s1| {
            let mut a = a.attach(s1)?;
            testing::spin_then_add(s1, &mut a, 1.0, spin_ns(50))?;
            ctx.with_stream(StreamOptions::new(), |s2| -> um::Result<()> {
                let mut b = b.attach(s2)?;
                testing::spin_then_add(s2, &mut b, 1.0, spin_ns(50))?;
                panic!("unwind with two kernels in flight")
            })
        });
    }));
    assert!(unwound.is_err());
    ctx.wait_idle()
        .expect("the context is usable after the unwind");

    let p = Managed::from_slice(&ctx, &[0.0f32; 64]).expect("alloc");
    let p = ctx
        .with_per_thread_stream(|outer| {
            let mut p = p.attach(outer)?;
            testing::add_scalar(outer, &mut p, 1.0)?;
            ctx.with_per_thread_stream(|inner| {
                let mut p = p.hand_off(inner)?;
                testing::add_scalar(inner, &mut p, 1.0)?;
                p.sync()
            })
        })
        .expect("stream work");
    assert!(p.iter().all(|v| *v == 2.0));
}

/// 22: a panicking `from_fn` leaks its allocation and never reads it; a mirror is not handed to
/// another context (two GPUs only).
#[test]
#[ignore = "needs a CUDA device"]
fn a_panicking_constructor_leaks_its_allocation_and_a_mirror_stays_home() {
    let ctx = gpu();
    let r = std::panic::catch_unwind(|| {
        Managed::from_fn(&ctx, 16, |i| {
            if i == 8 {
                panic!("in from_fn")
            } else {
                i as f32
            }
        })
    });
    assert!(r.is_err());
    if let Ok(ctx1) = Context::new(1) {
        let mirror = Managed::from_slice_mirrored(&ctx, &[1.0f32; 256]).expect("alloc");
        let got = ctx.with_stream(StreamOptions::new(), |a| {
            let m = mirror.attach(a)?;
            ctx1.with_stream(StreamOptions::new(), |b| m.hand_off(b)?.sync().map(drop))
        });
        assert_eq!(got, Err(Error::ContextMismatch));
    }
}
