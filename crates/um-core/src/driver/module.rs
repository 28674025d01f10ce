//! PTX modules, loaded once per context, and the kernels in them.

use std::borrow::Cow;
use std::ffi::CString;
use std::sync::{Arc, PoisonError};

use crate::driver;
use crate::driver::context::{Context, refuse_inside_stream_callback, relaxed_while_capturing};
use crate::driver::sys;
use crate::error::{Error, Result};

/// A loaded module; unloaded when the last handle to it goes (always inside `Context`'s drop,
/// with the context current, because every handle also holds the context).
pub(crate) struct LoadedModule {
    raw: sys::CUmodule,
    /// The PTX it was loaded from, for lookups by text: the `'static` text itself (no copy), or
    /// a copy of a text that lives shorter.
    text: Cow<'static, str>,
}

// SAFETY: module handles are driver tokens usable from any thread once loaded.
unsafe impl Send for LoadedModule {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for LoadedModule {}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `module_load` and is unloaded once, here; the functions of
        // it are held by `Kernel`s, which keep this value alive.
        let _ = unsafe { driver::module_unload(self.raw) };
    }
}

/// The modules of a context, found by the address of a `'static` PTX text or by the text, and
/// the kernels looked up through [`Context::kernel`], keyed by module and name.
#[derive(Default)]
pub(crate) struct ModuleCache {
    /// Each module, with the address of a `'static` text it was found by (`None` for the entry
    /// of a module loaded from a text that lives shorter: its address may later hold another
    /// text, so it never keys a lookup).
    entries: Vec<(Option<usize>, Arc<LoadedModule>)>,
    kernels: Vec<CachedKernel>,
}

/// A PTX text to find or load: `'static` (found by its address first, and kept without a copy)
/// or living shorter (found by its contents only, and copied if loaded).
#[derive(Clone, Copy)]
enum Ptx<'a> {
    Static(&'static str),
    Borrowed(&'a str),
}

impl<'a> Ptx<'a> {
    fn text(self) -> &'a str {
        match self {
            Ptx::Static(text) => text,
            Ptx::Borrowed(text) => text,
        }
    }

    /// The address that keys a lookup: a `'static` text's only. Such a text is never freed, so
    /// its address never holds another text: one at that address, of that length, is it.
    fn key(self) -> Option<usize> {
        match self {
            Ptx::Static(text) => Some(text.as_ptr() as usize),
            Ptx::Borrowed(_) => None,
        }
    }

    /// The text a newly loaded module keeps: the static one, or a copy.
    fn keep(self) -> Cow<'static, str> {
        match self {
            Ptx::Static(text) => Cow::Borrowed(text),
            Ptx::Borrowed(text) => Cow::Owned(text.to_owned()),
        }
    }
}

/// A kernel without its context: a cached `Kernel` would hold the context that holds this
/// cache, and neither would ever be freed.
struct CachedKernel {
    name: Arc<str>,
    raw: sys::CUfunction,
    max_threads: u32,
    module: Arc<LoadedModule>,
}

impl ModuleCache {
    /// Whether no module is loaded.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The module loaded from `ptx`: by address first (a `'static` text), then by text. Rust
    /// does not promise that the same `'static` text has one address everywhere (a `const` may
    /// be copied at each use), so a miss by address compares the texts before the caller loads
    /// the module again; a new `'static` address is remembered.
    fn find_module(&mut self, ptx: Ptx<'_>) -> Option<Arc<LoadedModule>> {
        let (key, text) = (ptx.key(), ptx.text());
        // The address and the length: a shorter text may start at the same address.
        if let Some((_, m)) = self
            .entries
            .iter()
            .find(|(k, m)| key.is_some() && *k == key && m.text.len() == text.len())
        {
            return Some(Arc::clone(m));
        }
        let m = self
            .entries
            .iter()
            .find(|(_, m)| m.text == text)
            .map(|(_, m)| Arc::clone(m))?;
        if key.is_some() {
            self.entries.push((key, Arc::clone(&m)));
        }
        Some(m)
    }

    /// Records `module`, loaded from `ptx`.
    fn insert(&mut self, ptx: Ptx<'_>, module: &Arc<LoadedModule>) {
        self.entries.push((ptx.key(), Arc::clone(module)));
    }
}

/// A PTX module loaded in a context.
#[derive(Clone)]
pub struct Module {
    // Fields drop in this order: the module's reference before the context's, so that the
    // context's own cache (which waits for the device before it unloads) holds the last one,
    // and a module is never unloaded after its primary context was released.
    inner: Arc<LoadedModule>,
    ctx: Context,
}

/// A kernel (`.entry`) of a loaded module.
#[derive(Clone)]
pub struct Kernel {
    // Before `ctx`, as in `Module`: dropped first, so that it is never the module's last
    // reference.
    _module: Arc<LoadedModule>,
    ctx: Context,
    raw: sys::CUfunction,
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`, read once when the kernel is looked up.
    max_threads: u32,
    name: Arc<str>,
}

// SAFETY: a CUfunction is a driver token usable from any thread; the module it belongs to is
// kept loaded by `_module`.
unsafe impl Send for Kernel {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for Kernel {}

/// The PTX ISA version of a PTX text (its `.version` directive), if it has one.
pub fn ptx_isa_version(ptx: &str) -> Option<&str> {
    ptx.lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix(".version"))
        .map(str::trim)
}

impl Context {
    /// Loads a PTX module, once per context: later calls with the same text (wherever it is)
    /// return the module already loaded.
    ///
    /// Any text: one made at run time (by NVRTC, read from a file) may be dropped as soon as
    /// this returns. The driver copies the image it loads (`cuModuleLoadData` reads it during
    /// the call only), and the context keeps a copy of the text to find the module by. The
    /// launchers that `um-build` generates go through [`Context::kernel`] with their `'static`
    /// text instead, which is found by its address and never copied.
    ///
    /// Also inside a capture closure ([`Stream::capture`](crate::Stream::capture)): on a
    /// thread that captures, the module is loaded with the thread's capture mode relaxed, as a
    /// launch's first use of a kernel is, so the capture stays valid and its kernels may be
    /// launched on the capture stream (a load enqueues nothing of its own into the graph).
    ///
    /// A driver too old for the PTX gives [`Error::PtxUnsupported`], naming both versions.
    pub fn load_ptx(&self, ptx: &str) -> Result<Module> {
        self.load_module(Ptx::Borrowed(ptx))
    }

    fn load_module(&self, ptx: Ptx<'_>) -> Result<Module> {
        refuse_inside_stream_callback("loading a module")?;
        let mut cache = self
            .modules()
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(m) = cache.find_module(ptx) {
            return Ok(Module {
                ctx: self.clone(),
                inner: m,
            });
        }
        let text = ptx.text();
        let image = CString::new(text).map_err(|_| Error::InteriorNul { what: "PTX image" })?;
        self.bind()?;
        // On a thread that captures (a `load_ptx` or `kernel` inside a capture closure), a load
        // in the capture's thread-local mode invalidates the capture (rule 182): the load is
        // made with the mode relaxed. It enqueues nothing, so nothing of it belongs in a graph.
        let raw = relaxed_while_capturing(|| driver::module_load(&image))?.map_err(|e| {
            if driver::is_unsupported_ptx(&e) {
                let (driver_major, driver_minor) = self.info().driver_version;
                Error::PtxUnsupported {
                    ptx_isa: ptx_isa_version(text).unwrap_or("unknown").to_owned(),
                    driver_major,
                    driver_minor,
                }
            } else {
                e
            }
        })?;
        let inner = Arc::new(LoadedModule {
            raw,
            text: ptx.keep(),
        });
        cache.insert(ptx, &inner);
        Ok(Module {
            ctx: self.clone(),
            inner,
        })
    }
}

impl Context {
    /// The kernel `name` of the PTX module `ptx`, loading the module if needed. Both lookups
    /// happen once per context; later calls return the cached handle.
    pub fn kernel(&self, ptx: &'static str, name: &'static str) -> Result<Kernel> {
        refuse_inside_stream_callback("loading a kernel")?;
        {
            let mut cache = self
                .modules()
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(module) = cache.find_module(Ptx::Static(ptx)) {
                if let Some(c) = cache
                    .kernels
                    .iter()
                    .find(|c| Arc::ptr_eq(&c.module, &module) && &*c.name == name)
                {
                    return Ok(Kernel {
                        ctx: self.clone(),
                        _module: module,
                        raw: c.raw,
                        max_threads: c.max_threads,
                        name: Arc::clone(&c.name),
                    });
                }
            }
        }
        let kernel = self.load_module(Ptx::Static(ptx))?.kernel(name)?;
        self.modules()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kernels
            .push(CachedKernel {
                name: Arc::clone(&kernel.name),
                raw: kernel.raw,
                max_threads: kernel.max_threads,
                module: Arc::clone(&kernel._module),
            });
        Ok(kernel)
    }
}

/// A thread's recent `(context id, PTX address and length, name address and length) ->
/// function` lookups, so that a typed launch finds its kernel without a lock or a reference
/// count. Functions stay valid for the life of their context (modules are unloaded only when it
/// is dropped), and context ids are never reused, so a stale entry can never match.
struct FunctionCache {
    entries: Vec<(FunctionKey, Function)>,
}

/// A kernel's function handle and the most threads a block of it may have.
#[derive(Clone, Copy)]
pub(crate) struct Function {
    pub(crate) raw: sys::CUfunction,
    pub(crate) max_threads: u32,
}

/// What identifies a cached function. Addresses alone do not: the compiler may place one
/// string literal inside another (`"k"` at the start of `"kernel"`), and the two names would
/// then find one function, launched with the other's arguments. Equal addresses and equal
/// lengths are the same text.
type FunctionKey = (u64, usize, usize, usize, usize);

fn function_key(context: u64, ptx: &'static str, name: &'static str) -> FunctionKey {
    (
        context,
        ptx.as_ptr() as usize,
        ptx.len(),
        name.as_ptr() as usize,
        name.len(),
    )
}

impl FunctionCache {
    const CAPACITY: usize = 64;
}

thread_local! {
    static FUNCTIONS: std::cell::RefCell<FunctionCache> =
        const { std::cell::RefCell::new(FunctionCache { entries: Vec::new() }) };
}

impl Context {
    /// The function `name` of module `ptx`, from this thread's cache when it is there.
    pub(crate) fn function_cached(
        &self,
        ptx: &'static str,
        name: &'static str,
    ) -> Result<Function> {
        refuse_inside_stream_callback("a launch")?;
        let key = function_key(self.id(), ptx, name);
        // `try_with`: in a thread-local destructor that runs after `FUNCTIONS` was destroyed (a
        // launch from a `thread_local!` value's `Drop`), the lookup
        // goes to the context's cache instead of panicking.
        let hit = FUNCTIONS
            .try_with(|c| c.borrow().entries.iter().find(|e| e.0 == key).map(|e| e.1))
            .ok()
            .flatten();
        if let Some(f) = hit {
            return Ok(f);
        }
        let function = self.kernel(ptx, name)?.function();
        let _ = FUNCTIONS.try_with(|c| {
            let mut c = c.borrow_mut();
            if c.entries.len() >= FunctionCache::CAPACITY {
                c.entries.clear();
            }
            c.entries.push((key, function));
        });
        Ok(function)
    }

    /// `(modules loaded, kernels cached)` in this context: distinct driver modules, and
    /// [`Context::kernel`] entries. For tests that check that nothing is loaded twice. Inside
    /// um's stream callback `(0, 0)`, without looking: the module lock may be held by a thread
    /// that waits for the device. Feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    pub fn cache_stats(&self) -> (usize, usize) {
        if refuse_inside_stream_callback("cache_stats").is_err() {
            return (0, 0);
        }
        let cache = self
            .modules()
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut modules: Vec<*const LoadedModule> =
            cache.entries.iter().map(|(_, m)| Arc::as_ptr(m)).collect();
        modules.sort();
        modules.dedup();
        (modules.len(), cache.kernels.len())
    }
}

impl Module {
    /// The kernel called `name` (its `extern "C"` name).
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let cname = CString::new(name).map_err(|_| Error::InteriorNul {
            what: "kernel name",
        })?;
        self.ctx.bind()?;
        // As the module's load: with lazy loading the driver may load the function here, which
        // on a capturing thread in thread-local mode would invalidate the capture.
        let (raw, max_threads) = relaxed_while_capturing(|| -> Result<_> {
            let raw = driver::module_function(self.inner.raw, &cname)?;
            Ok((raw, driver::function_max_threads_per_block(raw)?))
        })??;
        Ok(Kernel {
            ctx: self.ctx.clone(),
            _module: Arc::clone(&self.inner),
            raw,
            max_threads,
            name: name.into(),
        })
    }
}

impl Kernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    /// The function handle and its block limit.
    pub(crate) fn function(&self) -> Function {
        Function {
            raw: self.raw,
            max_threads: self.max_threads,
        }
    }

    /// The most threads a block of this kernel may have: the least of its
    /// `__launch_bounds__`, what its registers allow, and the device's limit
    /// (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`). A launch with a larger block is refused
    /// with [`Error::BlockTooLarge`](crate::Error::BlockTooLarge) before it reaches the driver.
    pub fn max_threads_per_block(&self) -> u32 {
        self.max_threads
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").field("name", &self.name).finish()
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::{LoadedModule, ModuleCache, Ptx, function_key, ptx_isa_version};
    use std::sync::Arc;

    /// A cache entry without a driver module (never unloaded: the cache is forgotten).
    fn module(ptx: Ptx<'_>) -> Arc<LoadedModule> {
        Arc::new(LoadedModule {
            raw: std::ptr::null_mut(),
            text: ptx.keep(),
        })
    }

    #[test]
    fn a_text_is_found_by_its_contents_and_only_a_static_one_by_its_address() {
        let mut cache = ModuleCache::default();
        let fixed: &'static str = ".version 9.0\n.entry a()";
        let a = module(Ptx::Static(fixed));
        cache.insert(Ptx::Static(fixed), &a);
        // A copy made at run time, dropped after: found by its contents.
        let copy = fixed.to_owned();
        let found = cache.find_module(Ptx::Borrowed(&copy));
        assert!(found.is_some_and(|m| Arc::ptr_eq(&m, &a)));
        drop(copy);
        // A text of the same length and other contents, and a prefix at the same address: not.
        let other = ".version 9.0\n.entry b()".to_owned();
        assert!(cache.find_module(Ptx::Borrowed(&other)).is_none());
        assert!(cache.find_module(Ptx::Static(&fixed[..12])).is_none());

        // A module loaded from a run-time text keeps a copy, and its address keys nothing.
        let text = ".version 9.0\n.entry c()".to_owned();
        let c = module(Ptx::Borrowed(&text));
        cache.insert(Ptx::Borrowed(&text), &c);
        assert!(cache.entries.iter().filter(|(k, _)| k.is_none()).count() == 1);
        assert_ne!(c.text.as_ptr(), text.as_ptr(), "the module keeps a copy");
        drop(text);
        let again = ".version 9.0\n.entry c()".to_owned();
        let found = cache.find_module(Ptx::Borrowed(&again));
        assert!(found.is_some_and(|m| Arc::ptr_eq(&m, &c)));
        // A static text with those contents is found too, and its address is remembered.
        let fixed_c: &'static str = ".version 9.0\n.entry c()";
        let found = cache.find_module(Ptx::Static(fixed_c));
        assert!(found.is_some_and(|m| Arc::ptr_eq(&m, &c)));
        assert!(
            cache
                .entries
                .iter()
                .any(|(k, m)| *k == Some(fixed_c.as_ptr() as usize) && Arc::ptr_eq(m, &c))
        );
        // The fake modules were never loaded: nothing to unload.
        drop((a, c));
        std::mem::forget(cache);
    }

    /// The address of a run-time text keys nothing: once it is freed, a `'static` text (a leaked
    /// one) or another run-time text may sit at that very address with other contents, and
    /// neither may find the module of the first. Whether the allocator reuses the address or
    /// not, only the contents decide.
    #[test]
    fn a_freed_run_time_text_leaves_no_address_that_finds_its_module() {
        let mut cache = ModuleCache::default();
        let first = ".version 9.0\n.entry first()".to_owned();
        let address = first.as_ptr() as usize;
        let m = module(Ptx::Borrowed(&first));
        cache.insert(Ptx::Borrowed(&first), &m);
        drop(first);
        // As many tries as it takes the allocator to hand the address out again (or not).
        let mut reused = false;
        for _ in 0..64 {
            let other = ".version 9.0\n.entry other()".to_owned();
            reused |= other.as_ptr() as usize == address;
            assert!(cache.find_module(Ptx::Borrowed(&other)).is_none());
            let fixed: &'static str = Box::leak(other.into_boxed_str());
            reused |= fixed.as_ptr() as usize == address;
            assert!(cache.find_module(Ptx::Static(fixed)).is_none());
        }
        println!("the freed text's address was reused: {reused}");
        // No lookup above added an entry, and the contents still find the module.
        assert_eq!(cache.entries.len(), 1);
        let again = ".version 9.0\n.entry first()".to_owned();
        assert!(
            cache
                .find_module(Ptx::Borrowed(&again))
                .is_some_and(|found| Arc::ptr_eq(&found, &m))
        );
        drop(m);
        std::mem::forget(cache);
    }

    #[test]
    fn a_name_inside_another_name_is_another_function() {
        // One literal, and a name that starts at the same address: the cache must tell them
        // apart, or `k` would be launched as `kernel` (other parameters).
        let kernel: &'static str = "kernel";
        let k: &'static str = &kernel[..1];
        assert_eq!(k.as_ptr(), kernel.as_ptr());
        assert_ne!(function_key(1, "ptx", kernel), function_key(1, "ptx", k));
        let ptx: &'static str = ".version 9.0\n.entry k()";
        assert_ne!(
            function_key(1, ptx, kernel),
            function_key(1, &ptx[..4], kernel)
        );
        assert_eq!(function_key(1, ptx, kernel), function_key(1, ptx, kernel));
    }

    #[test]
    fn reads_the_version_directive() {
        let ptx = "//\n// Generated by NVIDIA NVVM Compiler\n\n.version 9.0\n.target sm_75\n";
        assert_eq!(ptx_isa_version(ptx), Some("9.0"));
        assert_eq!(ptx_isa_version(".target sm_75\n"), None);
    }
}
