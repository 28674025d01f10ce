//! The model's kernels: what a PTX image declares (entry names, parameter sizes, `.maxntid`), and
//! the CPU twins of the kernels um's tests launch, chosen by name.

use std::collections::HashMap;

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
pub(crate) struct Args(pub(crate) Vec<Vec<u8>>);

impl Args {
    pub(crate) fn u64(&self, i: usize) -> u64 {
        let mut b = [0u8; 8];
        let a = self.0.get(i).map(Vec::as_slice).unwrap_or(&[]);
        let n = a.len().min(8);
        b[..n].copy_from_slice(&a[..n]);
        u64::from_le_bytes(b)
    }
    fn u32(&self, i: usize) -> u32 {
        self.u64(i) as u32
    }
    fn f32(&self, i: usize) -> f32 {
        f32::from_bits(self.u32(i))
    }
    /// The addresses the arguments could be: every 8-byte parameter.
    pub(crate) fn pointers(&self) -> Vec<usize> {
        (0..self.0.len())
            .filter(|&i| self.0[i].len() == 8)
            .map(|i| self.u64(i) as usize)
            .collect()
    }
}

/// `n` floats at `address`, as a mutable slice.
///
/// # Safety
///
/// `address` is the start of `n` floats of memory the model allocated, and nothing else
/// accesses them while the slice lives (the stream's order and the model's checks say so).
unsafe fn floats<'a>(address: u64, n: usize) -> &'a mut [f32] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(address as usize as *mut f32, n) }
}

/// Runs the CPU twin of kernel `name`; an unknown kernel does nothing, said once on stderr.
/// Returns the sticky error of a kernel that faults.
///
/// # Safety
///
/// The arguments are those of a launch um checked (every buffer long enough for its length
/// parameter), in memory the model allocated.
pub(crate) unsafe fn run(name: &str, a: &Args) -> Option<i32> {
    // SAFETY (every arm): um's launchers pass each buffer with its length (`um::len32` is the
    // buffer's length, checked before the launch), so `n` elements lie in the allocation.
    unsafe {
        match name {
            "add_scalar" | "bounded_add" => {
                let n = a.u32(2) as usize;
                let v = a.f32(1);
                floats(a.u64(0), n).iter_mut().for_each(|x| *x += v);
            }
            "spin_then_add" => {
                // The GPU's timer, as a sleep (at most 3 s: a huge `ns` means "long").
                let ns = a.u64(2).min(3_000_000_000);
                std::thread::sleep(std::time::Duration::from_nanos(ns));
                let n = a.u32(3) as usize;
                let v = a.f32(1);
                floats(a.u64(0), n).iter_mut().for_each(|x| *x += v);
            }
            "axpy" => {
                let n = a.u32(3) as usize;
                let k = a.f32(2);
                let x = floats(a.u64(0), n).to_vec();
                let y = floats(a.u64(1), n);
                for i in 0..n {
                    y[i] += k * x[i];
                }
            }
            "fill" => {
                let n = a.u32(2) as usize;
                let v = a.u32(1) as f32;
                floats(a.u64(0), n).iter_mut().for_each(|x| *x = v);
            }
            "scatter" => {
                let n = a.u32(3) as usize;
                let v = a.f32(2);
                let idx = std::slice::from_raw_parts(a.u64(1) as usize as *const u32, n).to_vec();
                let base = a.u64(0) as usize as *mut f32;
                for i in idx {
                    *base.add(i as usize) = v;
                }
            }
            "transform" => {
                let n = a.u32(2) as usize;
                let input = floats(a.u64(0), n).to_vec();
                let data = floats(a.u64(1), n);
                for i in 0..n {
                    data[i] += 2.0 * input[i];
                }
            }
            "convert" => {
                let n = a.u32(2) as usize;
                let data = floats(a.u64(1), n).to_vec();
                let out = floats(a.u64(0), n);
                for i in 0..n {
                    out[i] = 0.5 * data[i];
                }
            }
            "kernel" => {
                let n = a.u32(1) as i32;
                let x = floats(a.u64(0), n.max(0) as usize);
                // The kernel's own constant, not PI: its results are compared with it.
                #[allow(clippy::approx_constant)]
                let base = 3.14159f64;
                for (i, v) in x.iter_mut().enumerate() {
                    *v = base.powf(i as f64).sqrt() as f32;
                }
            }
            "empty" => {}
            "stamp" => {
                let (slot, n) = (a.u32(1), a.u32(2));
                if slot < n {
                    let t = a.u64(0) as usize as *mut u64;
                    *t.add(slot as usize) = now_ns();
                }
            }
            // A device-side trap: the context's sticky `CUDA_ERROR_LAUNCH_FAILED`.
            "trap_kernel" => return Some(719),
            // A write far outside every allocation (`tests/gpu_faults.rs`'s `oob_write`): the
            // sticky `CUDA_ERROR_ILLEGAL_ADDRESS`.
            "oob_write" => return Some(700),
            _ => unknown(name),
        }
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
