//! The model's kernels: what a PTX image declares (entry names, parameter sizes, `.maxntid`), and
//! the CPU twins of the kernels um's tests launch, chosen by name (safe code, on the same checked
//! [`LaunchArgs`] as a user's twins).

use std::collections::HashMap;

use super::twins::LaunchArgs;

/// One `.entry` of a PTX image.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The kernel's name.
    pub(crate) name: String,
    /// Each parameter's size in bytes, in order.
    pub(crate) params: Vec<usize>,
    /// `.maxntid`'s product, or 1024.
    pub(crate) max_threads: i32,
}

/// The entries of a PTX text (an image the model cannot read declares none).
pub(crate) fn parse_ptx(text: &str) -> HashMap<String, Entry> {
    let mut out = HashMap::new();
    let mut rest = text;
    while let Some(at) = rest.find(".entry ") {
        rest = &rest[at + ".entry ".len()..];
        let name_end = rest.find(['(', ' ', '\n', '\t']).unwrap_or(rest.len());
        let name = rest[..name_end].trim().to_owned();
        let body = rest.find('{').unwrap_or(rest.len());
        let head = &rest[..body];
        let mut params = Vec::new();
        if let (Some(open), Some(close)) = (head.find('('), head.find(')')) {
            for p in head[open + 1..close].split(',') {
                let p = p.trim();
                if p.is_empty() {
                    continue;
                }
                params.push(param_size(p));
            }
        }
        let max_threads = head
            .find(".maxntid")
            .map(|m| {
                head[m + ".maxntid".len()..]
                    .lines()
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .filter_map(|v| v.trim().parse::<i32>().ok())
                    .product()
            })
            .unwrap_or(1024);
        out.insert(
            name.clone(),
            Entry {
                name,
                params,
                max_threads,
            },
        );
    }
    out
}

/// The size of one PTX parameter declaration (`.param .u64 x`, `.param .align 4 .b8 x[4]`).
fn param_size(decl: &str) -> usize {
    if let (Some(open), Some(close)) = (decl.rfind('['), decl.rfind(']')) {
        if let Ok(n) = decl[open + 1..close].parse::<usize>() {
            return n;
        }
    }
    for (suffix, size) in [("64", 8), ("32", 4), ("16", 2), ("8", 1)] {
        if decl
            .split_whitespace()
            .any(|w| w.starts_with('.') && w.len() > 2 && w.ends_with(suffix))
        {
            return size;
        }
    }
    8
}

/// A launch's copied arguments: each parameter's bytes.
#[derive(Debug, Clone)]
pub(crate) struct Args(pub(crate) Vec<Vec<u8>>, pub(crate) u64);

std::thread_local! {
    /// The memory mask of the launch this thread makes next (`set_launch_memory`).
    static LAUNCH_MEMORY: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Says which parameters of the next launch on this thread are memory (bit `i` for parameter
/// `i`): um's launch path, from its typed arguments (buffers, and `DevicePtr`s an `unsafe`
/// launch vouches for). A twin gets a slice of those parameters only, never of a plain value
/// that happens to hold an address.
pub(crate) fn set_launch_memory(mask: u64) {
    LAUNCH_MEMORY.with(|m| m.set(mask));
}

/// The mask `set_launch_memory` left for this launch, cleared: 0 (no parameter is memory)
/// for a launch that did not come through um's launch path.
pub(crate) fn take_launch_memory() -> u64 {
    LAUNCH_MEMORY.with(|m| m.replace(0))
}

impl Args {
    pub(crate) fn u64(&self, i: usize) -> u64 {
        let mut b = [0u8; 8];
        let a = self.0.get(i).map(Vec::as_slice).unwrap_or(&[]);
        let n = a.len().min(8);
        b[..n].copy_from_slice(&a[..n]);
        u64::from_le_bytes(b)
    }
    /// The addresses the arguments could be: every 8-byte parameter.
    pub(crate) fn pointers(&self) -> Vec<usize> {
        (0..self.0.len())
            .filter(|&i| self.0[i].len() == 8)
            .map(|i| self.u64(i) as usize)
            .collect()
    }
}

/// The first `n` elements of a checked slice (all of it where it is shorter; none where the
/// parameter was no memory of the launch).
fn first<T>(s: Option<&mut [T]>, n: usize) -> &mut [T] {
    match s {
        Some(s) => {
            let n = n.min(s.len());
            &mut s[..n]
        }
        None => &mut [],
    }
}

/// As [`first`], copied out: a kernel's input, read before its output is borrowed.
fn input<T: Copy>(s: Option<&[T]>, n: usize) -> Vec<T> {
    s.map(|s| s[..n.min(s.len())].to_vec()).unwrap_or_default()
}

/// Runs the model's twin of kernel `name`, on the same checked arguments a user's twin gets
/// ([`LaunchArgs`]): a scalar only at its exact size, a buffer only as a slice inside the
/// launch's memory, cut to its length parameter. So a user's kernel that shares a name with one
/// of um's (`fill`, `kernel`, `scatter`, ...) but not its parameters reaches no memory past its
/// buffers; where its parameter sizes differ the twin does nothing. An unknown kernel does
/// nothing, said once on stderr. Returns the sticky error of a kernel that faults.
pub(crate) fn run(name: &str, a: &mut LaunchArgs<'_>) -> Option<i32> {
    let n = |a: &LaunchArgs<'_>, i| a.scalar::<u32>(i).map_or(0, |n| n as usize);
    match name {
        "add_scalar" | "bounded_add" => {
            if let Some(v) = a.scalar::<f32>(1) {
                let n = n(a, 2);
                first(a.buffer_mut::<f32>(0), n)
                    .iter_mut()
                    .for_each(|x| *x += v);
            }
        }
        "spin_then_add" => {
            // The GPU's timer, as a sleep (at most 3 s: a huge `ns` means "long").
            let ns = a.scalar::<u64>(2).unwrap_or(0).min(3_000_000_000);
            std::thread::sleep(std::time::Duration::from_nanos(ns));
            if let Some(v) = a.scalar::<f32>(1) {
                let n = n(a, 3);
                first(a.buffer_mut::<f32>(0), n)
                    .iter_mut()
                    .for_each(|x| *x += v);
            }
        }
        "axpy" => {
            if let Some(k) = a.scalar::<f32>(2) {
                let n = n(a, 3);
                let x = input(a.buffer::<f32>(0), n);
                for (y, x) in first(a.buffer_mut::<f32>(1), n).iter_mut().zip(x) {
                    *y += k * x;
                }
            }
        }
        "fill" => {
            if let Some(v) = a.scalar::<u32>(1) {
                let n = n(a, 2);
                first(a.buffer_mut::<f32>(0), n)
                    .iter_mut()
                    .for_each(|x| *x = v as f32);
            }
        }
        "scatter" => {
            if let Some(v) = a.scalar::<f32>(2) {
                let n = n(a, 3);
                let idx = input(a.buffer::<u32>(1), n);
                let base = first(a.buffer_mut::<f32>(0), usize::MAX);
                // An index past the buffer writes nothing here (on a GPU, past its end).
                for i in idx {
                    if let Some(x) = base.get_mut(i as usize) {
                        *x = v;
                    }
                }
            }
        }
        "transform" => {
            let n = n(a, 2);
            let input = input(a.buffer::<f32>(0), n);
            for (d, i) in first(a.buffer_mut::<f32>(1), n).iter_mut().zip(input) {
                *d += 2.0 * i;
            }
        }
        "convert" => {
            let n = n(a, 2);
            let data = input(a.buffer::<f32>(1), n);
            for (o, d) in first(a.buffer_mut::<f32>(0), n).iter_mut().zip(data) {
                *o = 0.5 * d;
            }
        }
        "kernel" => {
            if let Some(n) = a.scalar::<i32>(1) {
                let x = first(a.buffer_mut::<f32>(0), n.max(0) as usize);
                // The kernel's own constant, not PI: its results are compared with it.
                #[allow(clippy::approx_constant)]
                let base = 3.14159f64;
                for (i, v) in x.iter_mut().enumerate() {
                    *v = base.powf(i as f64).sqrt() as f32;
                }
            }
        }
        "empty" => {}
        "stamp" => {
            if let (Some(slot), Some(n)) = (a.scalar::<u32>(1), a.scalar::<u32>(2)) {
                if slot < n {
                    if let Some(t) =
                        first(a.buffer_mut::<u64>(0), n as usize).get_mut(slot as usize)
                    {
                        *t = now_ns();
                    }
                }
            }
        }
        // A device-side trap: the context's sticky `CUDA_ERROR_LAUNCH_FAILED`.
        "trap_kernel" => return Some(719),
        // A write far outside every allocation (`tests/gpu_faults.rs`'s `oob_write`): the
        // sticky `CUDA_ERROR_ILLEGAL_ADDRESS`.
        "oob_write" => return Some(700),
        _ => unknown(name),
    }
    None
}

/// The model's `%globaltimer`: nanoseconds since the model's first use, from 1.
fn now_ns() -> u64 {
    use std::sync::LazyLock;
    use std::time::Instant;
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    START.elapsed().as_nanos() as u64 + 1
}

fn unknown(name: &str) {
    use std::sync::Mutex;
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !said.iter().any(|s| s == name) {
        eprintln!(
            "um model: kernel `{name}` has no CPU twin; its launches do nothing \
             (um::model::register_kernel gives it one)"
        );
        said.push(name.to_owned());
    }
}
