//! A cuRAND generator that belongs to one stream, and the generations on `um`'s buffers.

use std::marker::PhantomData;

use um_core::{Context, Managed, Storage, Stream, StreamOwned};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::library::Curand;
use crate::result;
use crate::stream::RandStream;
use crate::sys;

/// Invariant in `'s`, as a stream's brand is.
type Brand<'s> = fn(&'s ()) -> &'s ();

/// Which pseudo-random algorithm a generator runs (`curandRngType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RngKind {
    /// `CURAND_RNG_PSEUDO_PHILOX4_32_10`: counter-based, the fastest set-up.
    #[default]
    Philox,
    /// `CURAND_RNG_PSEUDO_XORWOW`: cuRAND's own default.
    Xorwow,
    /// `CURAND_RNG_PSEUDO_MRG32K3A`.
    Mrg32k3a,
}

impl RngKind {
    fn raw(self) -> std::ffi::c_int {
        match self {
            RngKind::Philox => sys::RNG_PHILOX4_32_10,
            RngKind::Xorwow => sys::RNG_XORWOW,
            RngKind::Mrg32k3a => sys::RNG_MRG32K3A,
        }
    }
}

/// A cuRAND generator (`curandGenerator_t`, numbers made on the device) that belongs to one
/// stream for its whole life: bound to it (`curandSetStream`) when it is made, never moved.
///
/// **Why one stream.** A generator keeps state on the device that every generation reads and
/// advances. Bound to one stream, its generations run in that stream's order and no two can
/// run at once; nothing has to be recorded or waited for per call (a generator that served two
/// streams would have to order each after the other's last use). The brand `'s` ties it to its
/// stream's scope, and every call checks that its stream is that stream (the streams of a stream
/// set share a brand): [`Error::WrongStream`] otherwise. For several streams, make one `Rng`
/// per stream; seed them differently (or with one seed and
/// different [`RngKind`]s) for independent sequences.
///
/// **Threads.** Neither `Send` nor `Sync`: a generator is not thread-safe (cuRAND), and one of
/// the per-thread default stream is bound to that thread's stream.
///
/// **Buffers.** Each call writes a buffer owned by the generator's stream (`&mut`), of any
/// storage (unified, coherent or mirrored: a mirror's device half, marked written so its `sync`
/// copies it back). The call is asynchronous: `sync` the buffer to read the numbers.
///
/// **Captures.** A generator cannot belong to a graph's capture stream ([`RandStream`]). It is
/// made only while no capture of `um` is in progress on its device ([`Error::CaptureInProgress`]
/// otherwise, on any thread): cuRAND's set-up synchronizes with the legacy default stream, which
/// would fail the capture. Made before, a generator of an eager stream works inside a capture
/// closure and beside another thread's capture as anywhere else, its calls made with the
/// thread's capture mode relaxed ([`um_core::relaxed_while_capturing`]: cuRAND loads its kernels
/// lazily). Its drop waits for the device, so inside a capture closure it is kept and made once
/// the capture has ended ([`Context::with_idle_after_captures`]).
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use um_core::{Context, Managed, StreamOptions};
/// use um_curand::{Rng, RngKind};
///
/// let ctx = Context::new(0)?;
/// let x = Managed::<[f32]>::zeroed_slice(&ctx, 1 << 20)?;
/// let x = ctx.with_stream(StreamOptions::new(), |s| {
///     let mut rng = Rng::new(s, RngKind::Philox, 1234)?;
///     let mut x = x.attach(s)?;
///     rng.normal(s, &mut x, 0.0, 1.0)?; // on s, into memory s owns
///     x.sync()
/// })?;
/// let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64;
/// assert!(mean.abs() < 0.01);
/// # Ok(()) }
/// ```
pub struct Rng<'s, K: RandStream> {
    library: &'static Curand,
    generator: sys::Generator,
    ctx: Context,
    /// The [`Stream::id`] of the stream the generator belongs to.
    stream: u64,
    /// Invariant in `'s` (a brand, as `Stream`'s); the raw pointer above keeps it `!Send` and
    /// `!Sync`.
    _brand: PhantomData<(Brand<'s>, K)>,
}

impl<'s, K: RandStream> Rng<'s, K> {
    /// A generator of `kind` seeded with `seed`, belonging to `stream`, with the process's
    /// cuRAND ([`Curand::load`]). Its state is set up on `stream` before this returns
    /// (`curandGenerateSeeds`, enqueued there), so that a failure shows here.
    /// [`Error::CaptureInProgress`] while a capture of `um` is in progress on the device or on
    /// the calling thread, or waits to begin on the device (see "Captures" above), and where
    /// the calling thread is 16 idle sections deep (no further section can hold captures off).
    pub fn new(stream: &Stream<'s, K>, kind: RngKind, seed: u64) -> Result<Self> {
        Self::with_library(stream, Curand::load()?, kind, seed)
    }

    /// [`new`](Rng::new) with the given library.
    pub fn with_library(
        stream: &Stream<'s, K>,
        library: &'static Curand,
        kind: RngKind,
        seed: u64,
    ) -> Result<Self> {
        um_core::refuse_inside_stream_callback("making a cuRAND generator")?;
        let ctx = stream.context().clone();
        ctx.make_current()?;
        let api = library.api();
        let raw = stream.as_raw();
        // cuRAND's set-up (`curandCreateGenerator`, `curandGenerateSeeds`) allocates and
        // synchronizes with the legacy default stream: beside a capture in progress on the
        // device it would invalidate that capture, and on a capturing thread the driver refuses
        // it. So it runs with captures of `um` held off, and is refused while one is in
        // progress (on any thread) or waits to begin.
        let made = ctx.with_captures_held_off(|| -> Result<Self> {
            let generator = result::create(api, kind.raw())?;
            // From here on, drop destroys the generator.
            let rng = Rng {
                library,
                generator,
                ctx: ctx.clone(),
                stream: stream.id(),
                _brand: PhantomData,
            };
            // SAFETY: a live generator of this context (current, above) and a live stream of
            // it, borrowed for this call; the generator is unbound again before it is destroyed
            // (drop), so the binding never outlives what it names in a call.
            unsafe { result::set_stream(api, generator, raw) }?;
            // SAFETY: a live generator.
            unsafe { result::set_seed(api, generator, seed) }?;
            // SAFETY: a live generator, its context current, bound to a live stream.
            unsafe { result::generate_seeds(api, generator) }?;
            Ok(rng)
        })?;
        let rng = made.ok_or(Error::CaptureInProgress)??;
        Ok(rng)
    }

    /// The context the generator belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The library the generator was made by.
    pub fn library(&self) -> &'static Curand {
        self.library
    }

    /// The raw `curandGenerator_t`, for calls `um-curand` does not wrap (through
    /// [`Curand::api`]). Holding it is safe; every call with it is `unsafe`, and such a call
    /// must keep what this type keeps: only on this generator's thread, with its context
    /// current, never rebinding it to another stream, writing only memory that its stream
    /// owns, and never destroying it.
    pub fn as_raw(&self) -> sys::Generator {
        self.generator
    }

    /// Uniformly distributed numbers in (0, 1] into every element of `out`
    /// (`curandGenerateUniform` for `f32`, `curandGenerateUniformDouble` for `f64`), on
    /// `stream`, which must be the generator's own ([`Error::WrongStream`]); `out` must be
    /// owned by it ([`Error::StreamMismatch`] between the streams of a set).
    pub fn uniform<T: Element, M: Storage>(
        &mut self,
        stream: &Stream<'s, K>,
        out: &mut Managed<[T], StreamOwned<'s, K>, M>,
    ) -> Result<()> {
        self.check(stream, out)?;
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let mut out = out.as_device_ptr_mut();
        let (api, generator) = (self.library.api(), self.generator);
        // SAFETY: a live generator of this context (made current by `check`), bound to
        // `stream` since it was made (the same stream: `check`), used by this thread only
        // (`!Send`, `&mut self`). `out` is the device address of `n` `T`s owned by `stream`, so
        // only work on that stream touches them, and they stay allocated until that work is
        // done (a stream-owned buffer's drop waits for its stream).
        self.run(|| {
            // SAFETY: as above, for the piece `at..at + len` of the buffer (`pieces` covers
            // `0..n` and no more).
            pieces(n, |at, len| unsafe {
                result::uniform(api, generator, element(out.as_mut_ptr(), at), len)
            })
        })
    }

    /// Normally distributed numbers of mean `mean` and standard deviation `stddev` into every
    /// element of `out` (`curandGenerateNormal`, `curandGenerateNormalDouble`), on the
    /// generator's stream, as [`uniform`](Rng::uniform). cuRAND makes them in pairs: an odd
    /// length is [`Error::OddLength`]; a mean or deviation that is not finite, or a negative
    /// deviation, [`Error::Distribution`]; both before cuRAND runs.
    pub fn normal<T: Element, M: Storage>(
        &mut self,
        stream: &Stream<'s, K>,
        out: &mut Managed<[T], StreamOwned<'s, K>, M>,
        mean: T,
        stddev: T,
    ) -> Result<()> {
        let (m, d) = (mean.to_f64(), stddev.to_f64());
        if !m.is_finite() || !d.is_finite() || d < 0.0 {
            return Err(Error::Distribution { mean: m, stddev: d });
        }
        self.check(stream, out)?;
        let n = out.len();
        if n % 2 == 1 {
            return Err(Error::OddLength { len: n });
        }
        if n == 0 {
            return Ok(());
        }
        let mut out = out.as_device_ptr_mut();
        let (api, generator) = (self.library.api(), self.generator);
        self.run(|| {
            // SAFETY: as in `uniform`; `n` is even (checked above), and so is every piece.
            pieces(n, |at, len| unsafe {
                result::normal(
                    api,
                    generator,
                    element(out.as_mut_ptr(), at),
                    len,
                    mean,
                    stddev,
                )
            })
        })
    }

    /// Random 32-bit values into every element of `out` (`curandGenerate`), on the
    /// generator's stream, as [`uniform`](Rng::uniform).
    pub fn bits<M: Storage>(
        &mut self,
        stream: &Stream<'s, K>,
        out: &mut Managed<[u32], StreamOwned<'s, K>, M>,
    ) -> Result<()> {
        self.check(stream, out)?;
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let mut out = out.as_device_ptr_mut();
        let (api, generator) = (self.library.api(), self.generator);
        self.run(|| {
            // SAFETY: as in `uniform`, for `n` `u32`s.
            pieces(n, |at, len| unsafe {
                result::generate(api, generator, element(out.as_mut_ptr(), at), len)
            })
        })
    }

    /// Refuses a call inside um's stream callback, on another stream than the generator's, or
    /// into a buffer of another stream; makes the context current.
    fn check<T: ?Sized, M: Storage>(
        &self,
        stream: &Stream<'s, K>,
        out: &Managed<T, StreamOwned<'s, K>, M>,
    ) -> Result<()> {
        um_core::refuse_inside_stream_callback("a cuRAND call")?;
        if stream.id() != self.stream {
            return Err(Error::WrongStream);
        }
        // A poisoned stream's work was aborted half-done, as um's launches refuse it.
        if stream.is_poisoned() {
            return Err(Error::Um(um_core::Error::StreamPoisoned));
        }
        if !stream.owns(out) {
            return Err(Error::StreamMismatch);
        }
        Ok(self.ctx.make_current()?)
    }

    /// Makes `call` with the thread's capture mode relaxed inside a capture closure (cuRAND's
    /// first use of a kernel loads its module).
    fn run(&self, call: impl FnOnce() -> Result<()>) -> Result<()> {
        um_core::relaxed_while_capturing(call)?
    }
}

impl<K: RandStream> Drop for Rng<'_, K> {
    fn drop(&mut self) {
        // A generator destroyed with another context current could release the wrong
        // resources: if the context cannot be made current (inside um's stream callback, say),
        // leak it.
        if self.ctx.make_current().is_err() {
            return;
        }
        // Its generations may still run on its stream and use its state, which the destroy
        // frees. So, as `um-cublas`'s handles: wait for the device through um, which never
        // does so while a capture of um is in progress or waits to begin, and destroy inside
        // its idle section; where a capture stands in the way, um keeps the destroy and the
        // thread that ends the last such capture makes it, after the same wait.
        let api = *self.library.api();
        // Unbound here, while its stream is certainly alive (the brand `'s` keeps every `Rng`
        // inside its stream's scope, and this is the `Rng`'s end), not only in the destroy: a
        // kept destroy runs after the capture in its way has ended, when the stream may have
        // been destroyed already (one made and ended inside the capture closure) and its
        // handle reused, and `curandSetStream` would otherwise be called with the generator
        // still bound to that dead handle (cuRAND does not say that it never touches the
        // stream it replaces). Relaxed on a capturing thread, as the generator's other calls.
        let generator = self.generator;
        let _ = um_core::relaxed_while_capturing(|| {
            // SAFETY: a live generator, its context current (above), used by this thread only
            // (`!Send`, `&mut self`); null is the legacy stream, always valid, and the stream it
            // replaces is alive (see above). Enqueued work keeps the stream it was enqueued on.
            unsafe { result::set_stream(&api, generator, std::ptr::null_mut()) }
        });
        let generator = Raw(generator);
        let destroy = move || {
            let generator = generator;
            // SAFETY: the generator is live and destroyed only here, once. It is unbound again
            // (to null, the legacy stream, always valid) in case the unbind above was not made
            // (the capture mode could not be relaxed); it is then bound to null already or to
            // its stream. Every generation has completed (the wait before this closure runs),
            // and the context is current (the wait made it). Errors are ignored: drop never
            // panics.
            let _ = unsafe { result::set_stream(&api, generator.0, std::ptr::null_mut()) };
            // SAFETY: as above.
            let _ = unsafe { result::destroy(&api, generator.0) };
        };
        // `Err` (the wait failed): the closure is dropped unrun, and the generator leaked.
        let _ = self.ctx.with_idle_after_captures(destroy);
    }
}

/// The most elements one cuRAND call is given. cuRAND takes `size_t` lengths but draws only
/// the low 32 bits of a longer one (seen on CUDA 13.0: a length of 2^32 + 2 wrote 2
/// elements), so longer buffers are drawn in pieces; 2^31 is even, so every piece of an even
/// length is even too (normal numbers come in pairs).
const PIECE: usize = 1 << 31;

/// Calls `draw(start, len)` for consecutive pieces of at most [`PIECE`] elements covering
/// `0..n`, in order, stopping at the first error. Consecutive calls of one generator continue
/// its sequence.
fn pieces(n: usize, mut draw: impl FnMut(usize, usize) -> Result<()>) -> Result<()> {
    let mut at = 0;
    while at < n {
        let len = (n - at).min(PIECE);
        draw(at, len)?;
        at += len;
    }
    Ok(())
}

/// The device address of element `at` of the buffer whose first element is at `base`. A device
/// address is no pointer into memory Rust knows of (it is made from an integer, with no
/// provenance; a mirror's device half is not even mapped on the host), and `<*mut T>::add` is
/// defined only inside an allocation Rust can see: so the offset is address arithmetic
/// (`wrapping_add`), which holds for any address. `at` is within the buffer (`pieces`), so
/// nothing wraps.
fn element<T>(base: *mut T, at: usize) -> *mut T {
    base.wrapping_add(at)
}

/// The generator, moved into the destroy that drop may leave to another thread.
struct Raw(sys::Generator);

// SAFETY: a cuRAND generator may be used from any thread, one at a time; the only use of this
// one is its destroy, once, by whichever thread runs it.
unsafe impl Send for Raw {}

impl<K: RandStream> std::fmt::Debug for Rng<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rng")
            .field("device", &self.ctx.info().ordinal)
            .field("stream", &self.stream)
            .field("library", &self.library.path())
            .field("version", &self.library.version())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(n: usize) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        pieces(n, |at, len| {
            v.push((at, len));
            Ok(())
        })
        .expect("no error");
        v
    }

    #[test]
    fn lengths_past_two_to_the_31_are_drawn_in_even_pieces_that_cover_the_buffer() {
        assert_eq!(cut(0), vec![]);
        assert_eq!(cut(7), vec![(0, 7)]);
        assert_eq!(cut(PIECE), vec![(0, PIECE)]);
        let n = (1usize << 32) + 2;
        assert_eq!(cut(n), vec![(0, PIECE), (PIECE, PIECE), (2 * PIECE, 2)]);
        assert!(cut(n).iter().all(|&(_, len)| len % 2 == 0));
        // A failing piece stops the rest.
        let mut calls = 0;
        let r = pieces(n, |_, _| {
            calls += 1;
            Err(Error::WrongStream)
        });
        assert!(matches!(r, Err(Error::WrongStream)) && calls == 1);
    }

    /// The pieces past 2^31 elements are addressed by plain address arithmetic on a device
    /// address (which has no provenance, and is no allocation Rust knows of): element `at` of
    /// an `f64` buffer lies `8 * at` bytes past its start, also past 2^32 elements, and nothing
    /// is dereferenced on the host.
    #[test]
    fn pieces_of_a_device_buffer_are_addressed_by_their_offset_in_bytes() {
        let base = std::ptr::without_provenance_mut::<f64>(0x7f00_0000_0000);
        for at in [0, 1, PIECE, 2 * PIECE, 2 * PIECE + 2] {
            let p = element(base, at);
            assert_eq!(p.addr() - base.addr(), 8 * at, "element {at}");
        }
        let words = std::ptr::without_provenance_mut::<u32>(0x7f00_0000_0000);
        assert_eq!(element(words, PIECE).addr() - words.addr(), 4 * PIECE);
    }
}
