//! # um-build: typed, brand-checked launchers for your own CUDA kernels
//!
//! A build-script library. It compiles every `*.cu` file of a folder to PTX with nvcc, reads
//! each kernel's declaration, checks it against the PTX `.entry` that nvcc produced and (through
//! `static_assert`s compiled with the file) against the types nvcc compiled, and generates a Rust launcher per kernel, which `um::include_kernels!()` includes:
//!
//! ```no_run
//! // build.rs: fn main() {
//! um_build::Kernels::new("kernels").arch("compute_75").build_or_exit();
//! // }
//! ```
//!
//! ```ignore
//! // src/main.rs
//! um::include_kernels!(); // a module per .cu file: kernels/saxpy.cu -> saxpy::saxpy(..)
//! ```
//!
//! * A kernel declared `UM_SAFE_KERNEL void name(...)` (from `um.cuh`, which every compile can
//!   `#include`) gets a **safe** launcher, `name(stream, buffers.., scalars..)`, and
//!   `name_with(stream, um::Linear, ..)`. Its author promises the contract in `um.cuh` and
//!   [`docs/kernels.md`](https://github.com/um-rs/um/blob/main/docs/kernels.md); the launcher ensures the rest: one-dimensional launches, every length
//!   parameter (`um::len32 n`, by type) filled from its buffers, every buffer owned by the launch
//!   stream.
//! * A kernel declared `extern "C" __global__ void name(...)` gets an **`unsafe fn`** launcher
//!   that takes a full `um::LaunchConfig`; its `# Safety` section says what the body must do.
//!
//! Both take `&Managed<[T], StreamOwned<'s>>` for `const T *` parameters and `&mut` for `T *`,
//! and plain values or generated `#[repr(C)]` structs for the rest. Failures name the file,
//! the line, the kernel and the parameter, and say what to change ([`Error`]). The common
//! mistakes of a first kernel file (no `#include "um.cuh"`, a kernel in a namespace, a length
//! declared `int n`) are said in one such line before nvcc runs; a declaration that builds but
//! reads like a mistake is a `cargo:warning` ([`Built::warnings`]).
//!
//! The PTX a launcher embeds is the one checked, compiled in this build from this build's
//! check wrapper (or, without nvcc, read in this build from [`Kernels::prebuilt_ptx`]): the
//! generated file holds its text, and a compile that wrote no fresh PTX of its wrapper fails
//! the build (see [`Kernels::flag`] for the nvcc options refused). The toolchain is trusted to
//! compile the wrapper it is given, as rustc is trusted to compile Rust: the nvcc run (see
//! [`Kernels::nvcc`]), the tools it runs, and the host compiler it finds on `PATH`.
//!
//! [`Kernels::build_or_exit`] prints a failure as it is (the [`Error`]'s `Display`) and exits
//! with status 1, which is what a build script wants; [`Kernels::build`] returns it.
//!
//! nvcc is found through [`Kernels::nvcc`], `$NVCC`, `$CUDA_PATH/bin/nvcc`,
//! `/usr/local/cuda/bin/nvcc`, `$UM_LOCAL_NVCC`,
//! `~/.local/share/um-cuda/cuda-13.0/nvidia/cu13/bin/nvcc` (where the command of `um`'s README
//! installs nvcc 13.0 from PyPI, which the "nvcc not found" error repeats), then `PATH`. `$UM_CUDA_ARCH` overrides the
//! architecture set with [`Kernels::arch`]. A crate that ships its PTX
//! ([`Kernels::prebuilt_ptx`], an `unsafe fn`: the caller promises the files are um-build's
//! own output for these inputs) builds without nvcc, as `um-kernels` does on machines without
//! a CUDA toolkit and on docs.rs.

mod check;
mod contract;
mod error;
mod fresh;
mod generate;
mod inputs;
mod mistakes;
mod nvcc;
mod ptx;
mod source;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

pub use error::{Error, Result};

/// `um.cuh`: `UM_SAFE_KERNEL` and the index helpers of the contract. [`Kernels::build`] puts it
/// on nvcc's include path; it is here for tools that want a copy.
pub const HEADER: &str = include_str!("../include/um.cuh");

/// The architecture PTX is built for unless [`Kernels::arch`] or `$UM_CUDA_ARCH` says
/// otherwise: Turing and every later GPU JIT-compile it.
pub const DEFAULT_ARCH: &str = "compute_75";

/// The name of the file `um::include_kernels!()` includes, inside `$OUT_DIR`.
pub const GENERATED_FILE: &str = "um_kernels.rs";

/// A folder of CUDA kernels to compile and generate launchers for.
#[derive(Debug, Clone)]
pub struct Kernels {
    dir: PathBuf,
    arch: Option<String>,
    nvcc: Option<PathBuf>,
    flags: Vec<String>,
    out_dir: Option<PathBuf>,
    prebuilt: Option<PathBuf>,
}

/// What [`Kernels::build`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The generated Rust file.
    pub generated: PathBuf,
    /// The `.cu` files compiled, in order.
    pub sources: Vec<PathBuf>,
    /// Kernels that got a safe launcher.
    pub safe_kernels: Vec<String>,
    /// Kernels that got an `unsafe fn` launcher.
    pub unsafe_kernels: Vec<String>,
    /// Declarations that build but read like a mistake (a plain integer named for a buffer's
    /// length, `int ny` beside a buffer `y`), each also printed as a `cargo:warning`.
    pub warnings: Vec<Error>,
}

impl Kernels {
    /// Every `*.cu` file directly inside `dir` (relative to the crate's manifest directory).
    pub fn new(dir: impl AsRef<Path>) -> Kernels {
        Kernels {
            dir: dir.as_ref().to_path_buf(),
            arch: None,
            nvcc: None,
            flags: Vec::new(),
            out_dir: None,
            prebuilt: None,
        }
    }

    /// The virtual architecture to build PTX for (default [`DEFAULT_ARCH`]); `$UM_CUDA_ARCH`
    /// still overrides it, so a user can retarget without editing the build script.
    pub fn arch(mut self, arch: &str) -> Kernels {
        self.arch = Some(arch.to_owned());
        self
    }

    /// The nvcc to use, before any other is looked for.
    ///
    /// The nvcc um-build runs, found or given here, is trusted, with the tools it runs (its
    /// `nvcc.profile`, cudafe++, cicc) and the host compiler it finds on `PATH` (with that
    /// compiler's own environment), to compile the check wrapper it is given, as rustc is
    /// trusted to compile Rust: the static_asserts that check each declaration are evaluated by
    /// that compiler. A program given here that is not nvcc, and compiles other code around
    /// the wrapper's mark, is not detected. What the mark does detect is a file that this run
    /// did not write from this wrapper: a stale file, an output folder shared between builds
    /// or kernel folders, an nvcc option under which nvcc writes nothing or something else.
    pub fn nvcc(mut self, path: impl AsRef<Path>) -> Kernels {
        self.nvcc = Some(path.as_ref().to_path_buf());
        self
    }

    /// One more nvcc argument (`-DNAME=1`, `-I dir` as two flags, `--use_fast_math`, `-G`,
    /// ...), passed after um-build's own `--ptx -arch=.. -O3 -I ..` and before its `-o`.
    ///
    /// um-build reads back the PTX that nvcc writes, so [`build`](Kernels::build) refuses,
    /// before nvcc runs, a flag that changes what nvcc writes or where, or makes it write
    /// nothing: `-o`/`--output-file`, `-odir`/`--output-directory`; the phases other than
    /// `--ptx` (`-E`/`--preprocess`, `-M`/`--generate-dependencies`,
    /// `-MM`/`--generate-nonsystem-dependencies`, `-cuda`, `-cubin`, `-fatbin`, `-optix-ir`,
    /// `-ltoir`, `-c`/`--compile`, `-dc`/`--device-c`, `-dw`/`--device-w`,
    /// `-dlink`/`--device-link`, `-link`, `-lib`, `-run`, `-fdevice-syntax-only`,
    /// `-clean`/`--clean-targets`); and `-dryrun`, `-V`/`--version`, `-h`/`--help`,
    /// `-arch-ls`/`--list-gpu-arch`, `-code-ls`/`--list-gpu-code`.
    ///
    /// It also refuses a flag that substitutes or instructs a tool of nvcc's pipeline, since
    /// the check wrapper is only as good as the compiler that reads it (a host compiler that
    /// drops its `static_assert`s still compiles the rest): `-ccbin`/`--compiler-bindir`,
    /// `-arbin`/`--archiver-binary`, `-ldir`/`--libdevice-directory`,
    /// `-noprof`/`--dont-use-profile`, the tool prefixes (`--all-prefix`, `--cpp-prefix`,
    /// `--cicc-prefix`, `--cudafe-prefix`, `--ptxas-prefix`, `--nvlink-prefix`, and the drive
    /// prefixes `-idp`, `-ddp`, `-dp`), the options handed to a tool (`-Xcompiler`/
    /// `--compiler-options`, `-Xlinker`, `-Xarchive`, `-Xptxas`, `-Xnvlink`, `-Xfatbin`,
    /// `-Xcicc`, `-Xcudafe`, `-Xnvvm`, `-Xnvasm`, `-Xnvdisasm` and their `--<tool>-options`
    /// forms), `--forward-unknown-to-host-compiler`, `--forward-unknown-to-host-linker`,
    /// `--forward-unknown-opts`, and any other option whose name begins with `X` or ends with
    /// `-options` or `-prefix`; and `-optf`/`--options-file`, which could carry any of these.
    /// nvcc runs without `NVCC_CCBIN`, `NVCC_PREPEND_FLAGS`, `NVCC_APPEND_FLAGS`,
    /// `CUDAFE_FLAGS`, `PTXAS_FLAGS`, `INCLUDES`, `SYSTEM_INCLUDES` and `LIBRARIES` in its
    /// environment, which would do the same unseen.
    ///
    /// nvcc runs each tool of its pipeline through `sh`, every argument in double quotes, so a
    /// flag that holds `$`, a backquote, a double quote, a backslash or a control character is
    /// refused whatever its option (`-DX=$(cmd)` would run `cmd` mid-compile); so is an output
    /// folder or kernel path that holds one. nvcc's temporary files go to a folder of the
    /// build's own (`TMPDIR` is set to `um-ptx/nvcc-tmp` under the output folder).
    ///
    /// A flag is matched by its name (up to `=` or a space), with one or two leading dashes;
    /// nvcc takes no abbreviation of a name. Whatever the flags, a build embeds only PTX that
    /// nvcc wrote in this run from this build's check wrapper: the wrapper defines a variable
    /// named at random for it, and PTX without that variable's declaration is refused.
    pub fn flag(mut self, flag: &str) -> Kernels {
        self.flags.push(flag.to_owned());
        self
    }

    /// Where to write (default `$OUT_DIR`, which `include_kernels!` reads).
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Kernels {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// A folder (relative to the crate's manifest directory) of PTX built earlier from these
    /// kernels, `<file>.ptx` for each `<file>.cu`, used when no nvcc is found: the crate then
    /// builds without a CUDA toolkit (on docs.rs, say). With nvcc, the kernels are compiled and
    /// this folder is not read.
    ///
    /// Without nvcc, each declaration is still checked against its `.entry` in the given PTX
    /// (count, pointer-ness, width, struct layouts), for dynamic shared memory and for a fixed
    /// block shape, but the compiler-side check (the `static_assert`s of every declaration)
    /// cannot run again: it is the one of the build that made the PTX. So each file must be
    /// what [`Kernels::build`] wrote with nvcc into `$OUT_DIR/um-ptx/`, and um-build checks
    /// what it can of that: every file it writes begins with the line `// um-build inputs
    /// <hex>`, a hash (64-bit FNV-1a) of, in this order, the `.cu` file's bytes, `um.cuh`'s
    /// bytes ([`HEADER`]), the architecture (`compute_NN`, from the PTX's `.target sm_NN`) and
    /// each flag ([`Kernels::flag`]) in order, each field hashed as its length (8 bytes,
    /// little-endian) followed by its bytes. A prebuilt file whose first line is not the line
    /// of this build's inputs (missing, or from before a change of the `.cu` file, `um.cuh` or
    /// the flags) fails the build, saying to rebuild it with nvcc; so does a missing file.
    /// Headers the `.cu` file includes, other than `um.cuh`, are not hashed. What the launchers
    /// embed, and the copy in `$OUT_DIR/um-ptx/`, is the text read from this folder in this
    /// build.
    ///
    /// # Safety
    ///
    /// Each `<file>.ptx` in `dir` is PTX that um-build wrote with nvcc (into
    /// `$OUT_DIR/um-ptx/`) from the same `<file>.cu`, the same `um.cuh`, and the same
    /// architecture and flags, unchanged since. The inputs line catches a stale or mismatched
    /// file, not a forged one: PTX of another declaration with a matching line would give a
    /// safe launcher values its kernel was not compiled for. Keep a test that rebuilds the
    /// folder with nvcc and compares (`um-kernels` does: `tests/shipped_ptx.rs`).
    pub unsafe fn prebuilt_ptx(mut self, dir: impl AsRef<Path>) -> Kernels {
        self.prebuilt = Some(dir.as_ref().to_path_buf());
        self
    }

    /// [`build`](Kernels::build) for a build script: on failure, prints the error as its
    /// `Display` shows it (file and line, kernel, parameter, what is wrong, what to change) to
    /// stderr, which cargo shows under `--- stderr`, and exits with status 1. Unlike
    /// `build().unwrap()`, no panic message wraps it.
    ///
    /// ```no_run
    /// // build.rs: fn main() {
    /// um_build::Kernels::new("kernels").build_or_exit();
    /// // }
    /// ```
    pub fn build_or_exit(self) -> Built {
        match self.build() {
            Ok(built) => built,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }

    /// Compiles, checks and generates; prints the `cargo:rerun-if-...` lines.
    pub fn build(self) -> Result<Built> {
        let manifest = env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
        let dir = manifest.join(&self.dir);
        let out_dir = match (&self.out_dir, env::var_os("OUT_DIR")) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => PathBuf::from(d),
            (None, None) => {
                return Err(Error::new("OUT_DIR is not set")
                    .help("call Kernels::build from a build script, or set Kernels::out_dir"));
            }
        };
        // First, so that a build that fails leaves nothing for `include_kernels!` to include:
        // no launcher of an earlier build, of other kernels or other PTX, outlives a failure.
        let generated = out_dir.join(GENERATED_FILE);
        fresh::remove(&generated)?;
        nvcc::check_flags(&self.flags).map_err(|e| e.in_file(&dir))?;
        for var in nvcc::VARS.iter().chain(&["UM_CUDA_ARCH"]) {
            println!("cargo:rerun-if-env-changed={var}");
        }
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut sources: Vec<PathBuf> = fs::read_dir(&dir)
            .map_err(|e| {
                Error::new(format!("cannot read the kernel folder: {e}"))
                    .in_file(&dir)
                    .help("Kernels::new takes a folder relative to the crate's Cargo.toml")
            })?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "cu"))
            .collect();
        sources.sort();
        let requested_arch = env::var("UM_CUDA_ARCH").ok().or(self.arch.clone());
        let arch = requested_arch
            .clone()
            .unwrap_or_else(|| DEFAULT_ARCH.to_owned());
        let include = out_dir.join("um-include");
        let ptx_dir = out_dir.join("um-ptx");
        let check_dir = out_dir.join("um-check");
        for d in [&include, &ptx_dir, &check_dir] {
            fs::create_dir_all(d)
                .map_err(|e| Error::new(format!("cannot create {}: {e}", d.display())))?;
        }
        fresh::write_new(&include.join("um.cuh"), HEADER)?;
        // Without nvcc, a crate that ships its PTX uses it (`prebuilt_ptx`).
        let ptx_from = match (nvcc::find(self.nvcc.as_deref()), &self.prebuilt) {
            (Ok(nvcc), _) => PtxFrom::Nvcc(nvcc),
            (Err(_), Some(dir)) => PtxFrom::Prebuilt(manifest.join(dir)),
            (Err(e), None) => return Err(e),
        };
        if let PtxFrom::Prebuilt(dir) = &ptx_from {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
        let mut prebuilt_arch: Option<String> = None;
        let mut warnings = Vec::new();

        let mut parsed = Vec::new();
        for src in &sources {
            println!("cargo:rerun-if-changed={}", src.display());
            let stem = src
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("kernels");
            let module = generate::module_name(stem);
            if parsed
                .iter()
                .any(|(m, ..): &(String, _, _, _)| *m == module)
            {
                return Err(
                    Error::new(format!("a second file maps to module `{module}`"))
                        .in_file(src)
                        .help("give the .cu files names that differ in more than punctuation"),
                );
            }
            // Files are named for the module as written, without a raw identifier's `r#`.
            let file_stem = module.trim_start_matches("r#").to_owned();
            // The PTX this build checks, for users and tools (the generated file holds its
            // text): none of an earlier build is left there, whatever happens below.
            let checked = ptx_dir.join(format!("{file_stem}.ptx"));
            fresh::remove(&checked).map_err(|e| e.in_file(src))?;
            // The path goes into the wrapper's `#include "..."` and into generated comments:
            // a quote or a line break in it would end either early.
            if src
                .to_string_lossy()
                .contains(|c: char| c.is_control() || c == '"' || c == '`')
            {
                return Err(
                    Error::new("the path has a quote, a backquote or a control character")
                        .in_file(src)
                        .help("rename the file or folder"),
                );
            }
            let text = fs::read_to_string(src)
                .map_err(|e| Error::new(format!("cannot read: {e}")).in_file(src))?;
            // What the text alone can show is said before nvcc runs, in one line with its fix:
            // a missing `#include "um.cuh"`, a kernel in a namespace (`parse`), a buffer
            // without a length or a length declared as a plain integer, too many parameters.
            mistakes::missing_include(&text).map_err(|e| e.in_file(src))?;
            let source = source::parse(&text).map_err(|e| e.in_file(src))?;
            contract::check_declarations(&source).map_err(|e| e.in_file(src))?;
            for warning in mistakes::warnings(&source) {
                let warning = warning.in_file(src);
                // One `cargo:warning` per line: cargo shows each as its own `warning:` line.
                for (i, line) in warning.to_string().lines().enumerate() {
                    let prefix = if i == 0 { "um-build: " } else { "" };
                    println!("cargo:warning={prefix}{line}");
                }
                warnings.push(warning);
            }
            let ptx = match &ptx_from {
                PtxFrom::Nvcc(nvcc) => {
                    let proved = compile_checked(
                        nvcc,
                        &arch,
                        &include,
                        &self.flags,
                        &source,
                        src,
                        &check_dir.join(format!("{file_stem}.cu")),
                        &check_dir.join(format!("{file_stem}.ptx")),
                    )?;
                    // What it was built from, first: a prebuilt copy is checked against it.
                    let target =
                        ptx::target_arch(&ptx::Code::new(&proved)).map_err(|e| e.in_file(src))?;
                    inputs::with_line(&proved, inputs::hash(text.as_bytes(), &target, &self.flags))
                }
                PtxFrom::Prebuilt(dir) => {
                    let (from, ptx) = use_prebuilt(dir, &file_stem).map_err(|e| e.in_file(src))?;
                    let target =
                        ptx::target_arch(&ptx::Code::new(&ptx)).map_err(|e| e.in_file(src))?;
                    if let Some(other) = prebuilt_arch.as_ref().filter(|a| **a != target) {
                        return Err(Error::new(format!(
                            "the prebuilt PTX is for {target}, another file's for {other}"
                        ))
                        .in_file(src)
                        .help("rebuild every prebuilt PTX file for one architecture"));
                    }
                    // Built from this file, um.cuh and these flags, for its architecture.
                    inputs::check(
                        &ptx,
                        inputs::hash(text.as_bytes(), &target, &self.flags),
                        &target,
                        &from,
                    )
                    .map_err(|e| e.in_file(src))?;
                    prebuilt_arch = Some(target);
                    ptx
                }
            };
            ptx::check(&source, &ptx).map_err(|e| e.in_file(src))?;
            fresh::write_new(&checked, &ptx).map_err(|e| e.in_file(src))?;
            parsed.push((module, ptx, source, src.clone()));
        }
        // PTX given, not built: the architecture is the PTX's own.
        let arch = match (&ptx_from, prebuilt_arch) {
            (PtxFrom::Prebuilt(dir), Some(target)) => {
                let asked = match requested_arch.as_ref().filter(|a| **a != target) {
                    Some(a) => format!("; {a} (UM_CUDA_ARCH or Kernels::arch) needs nvcc"),
                    None => String::new(),
                };
                println!(
                    "cargo:warning=um-build: nvcc not found: using the prebuilt PTX of {} \
                     (built for {target}){asked}",
                    dir.display()
                );
                target
            }
            _ => arch,
        };
        let units: Vec<generate::Unit<'_>> = parsed
            .iter()
            .map(|(module, ptx, source, src)| generate::Unit {
                file: src.clone(),
                module: module.clone(),
                // Shown in doc comments of the generated code: one line, whatever the name.
                shown_path: src
                    .strip_prefix(&manifest)
                    .unwrap_or(src)
                    .display()
                    .to_string()
                    .replace(|c: char| c.is_control() || c == '`', "?"),
                ptx,
                source,
            })
            .collect();
        let code = generate::generate(&units, &arch).map_err(|e| {
            // Errors from generation carry the kernel; find its file.
            let file = parsed
                .iter()
                .find(|(.., s, _)| {
                    s.kernels
                        .iter()
                        .any(|k| Some(k.name.as_str()) == e.kernel_name())
                })
                .map(|(.., path)| path.clone());
            match file {
                Some(f) => e.in_file(&f),
                None => e,
            }
        })?;
        // Last: it holds every checked PTX text, not a path to one.
        fresh::write_new(&generated, &code)?;
        let (safe, unsafe_): (Vec<_>, Vec<_>) = parsed
            .iter()
            .flat_map(|(.., s, _)| s.kernels.iter())
            .partition(|k| k.safe);
        Ok(Built {
            generated,
            sources,
            safe_kernels: safe.into_iter().map(|k| k.name.clone()).collect(),
            unsafe_kernels: unsafe_.into_iter().map(|k| k.name.clone()).collect(),
            warnings,
        })
    }
}

/// Compiles `src` to PTX through a wrapper (written to `wrapper`) whose static_asserts check
/// what um-build read against what the compiler sees (check.rs): macros, typedefs, `#if`
/// branches and struct attributes cannot make the reading differ from the kernel. Returns
/// the PTX that nvcc wrote to `ptx` in this run, proved to be that wrapper's (fresh.rs), with
/// the wrapper's mark taken out.
#[allow(clippy::too_many_arguments)]
fn compile_checked(
    nvcc: &Path,
    arch: &str,
    include: &Path,
    flags: &[String],
    source: &source::Source,
    src: &Path,
    wrapper: &Path,
    ptx: &Path,
) -> Result<String> {
    let absolute = if src.is_absolute() {
        src.to_path_buf()
    } else {
        env::current_dir().map_or_else(|_| src.to_path_buf(), |d| d.join(src))
    };
    let (text, mark) = check::wrapper(source, &absolute);
    fresh::write_new(wrapper, &text).map_err(|e| e.in_file(src))?;
    nvcc::compile(nvcc, arch, include, flags, wrapper, ptx).map_err(|e| {
        Error::new(format!(
            "{}\n(nvcc compiled {} through {}, which adds um-build's checks of the \
             declarations it read)",
            e.message(),
            src.display(),
            wrapper.display()
        ))
        .in_file(src)
        .help(
            "errors at lines of um-check/ are um-build's checks of what it read: each \
             names the kernel, the parameter or struct, and what um-build read. Declare \
             each kernel at global scope as `UM_SAFE_KERNEL void k(...)` or \
             `extern \"C\" __global__ void k(...)`, and structs at global scope, with no \
             macro, typedef or #if making the compiled declaration differ from the text",
        )
    })?;
    // `nvcc::compile` removed the file before nvcc ran: what is there now, nvcc wrote.
    let bytes = fs::read(ptx).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::new(format!(
                "nvcc exited successfully but wrote no PTX to {}\ncommand: {} ... -o {} {}",
                ptx.display(),
                nvcc.display(),
                ptx.display(),
                wrapper.display()
            ))
            .help(
                "is it nvcc (Kernels::nvcc, $NVCC, ...)? An nvcc option can make it exit 0 \
                 without compiling (--dryrun, --version, --help): remove it from the flags",
            )
        } else {
            Error::new(format!("cannot read nvcc's PTX {}: {e}", ptx.display()))
        }
        .in_file(src)
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Error::new(format!(
            "what nvcc wrote to {} is not PTX (not text)",
            ptx.display()
        ))
        .help("a flag may have made nvcc write a binary (-cubin, -optix-ir, ...): remove it")
        .in_file(src)
    })?;
    mark.proved(&text, ptx).map_err(|e| e.in_file(src))
}

/// Where [`Kernels::build`] takes the PTX from.
enum PtxFrom {
    /// Compiled by this nvcc, through the check wrapper.
    Nvcc(PathBuf),
    /// Read from this folder ([`Kernels::prebuilt_ptx`]): no nvcc was found.
    Prebuilt(PathBuf),
}

/// Reads `dir/<stem>.ptx`, the PTX given for this file: its path and text. `Kernels::build`
/// checks it, writes it to `um-ptx/` and embeds it in the generated file, as it does with nvcc's.
fn use_prebuilt(dir: &Path, stem: &str) -> Result<(PathBuf, String)> {
    let from = dir.join(format!("{stem}.ptx"));
    println!("cargo:rerun-if-changed={}", from.display());
    let ptx = fs::read_to_string(&from).map_err(|e| {
        Error::new(format!(
            "nvcc not found, and the prebuilt PTX {} cannot be read: {e}",
            from.display()
        ))
        .help(
            "install a CUDA toolkit (set NVCC to its nvcc), or rebuild the prebuilt PTX with \
             nvcc: it is what Kernels::build writes to $OUT_DIR/um-ptx/",
        )
    })?;
    Ok((from, ptx))
}

/// Checks one CUDA source against its PTX and returns the generated Rust, without nvcc or a
/// build script: what [`Kernels::build`] does for each file, for tests and tools.
pub fn generate_for(module: &str, cuda_source: &str, ptx: &str) -> Result<String> {
    let source = source::parse(cuda_source)?;
    contract::check_declarations(&source)?;
    ptx::check(&source, ptx)?;
    let module = generate::module_name(module);
    generate::generate(
        &[generate::Unit {
            file: PathBuf::from(format!("{}.cu", module.trim_start_matches("r#"))),
            ptx,
            shown_path: format!("{}.cu", module.trim_start_matches("r#")),
            module,
            source: &source,
        }],
        DEFAULT_ARCH,
    )
}
