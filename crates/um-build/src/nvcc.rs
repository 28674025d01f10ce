//! Finding nvcc and compiling one `.cu` file to PTX.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The environment variables nvcc discovery reads, in order.
pub(crate) const VARS: &[&str] = &["NVCC", "CUDA_PATH", "UM_LOCAL_NVCC", "PATH"];

/// nvcc: `explicit`, then `$NVCC`, `$CUDA_PATH/bin/nvcc`, `/usr/local/cuda/bin/nvcc`,
/// `$UM_LOCAL_NVCC` (the copy `um`'s `scripts/setup.sh` installs), then `nvcc` on `PATH`.
pub(crate) fn find(explicit: Option<&Path>) -> Result<PathBuf> {
    let executable = |p: PathBuf| p.is_file().then_some(p);
    explicit
        .map(Path::to_path_buf)
        .and_then(executable)
        .or_else(|| env::var_os("NVCC").map(PathBuf::from).and_then(executable))
        .or_else(|| {
            env::var_os("CUDA_PATH").and_then(|d| executable(Path::new(&d).join("bin/nvcc")))
        })
        .or_else(|| executable(PathBuf::from("/usr/local/cuda/bin/nvcc")))
        .or_else(|| {
            env::var_os("UM_LOCAL_NVCC")
                .map(PathBuf::from)
                .and_then(executable)
        })
        .or_else(|| {
            env::var_os("PATH")
                .and_then(|paths| env::split_paths(&paths).find_map(|d| executable(d.join("nvcc"))))
        })
        .ok_or_else(|| {
            Error::new("nvcc not found").help(
                "install a CUDA toolkit, and unless it is in /usr/local/cuda, set NVCC to its \
                 nvcc, for example in the `[env]` table of the crate's .cargo/config.toml \
                 (`NVCC = \"/opt/cuda/bin/nvcc\"`; $CUDA_PATH/bin/nvcc is tried too, but \
                 CUDA_PATH does not tell the link step where libcuda.so is: set \
                 CUDA_LIBRARY_PATH for that). In the um repository, `bash scripts/setup.sh` \
                 installs nvcc 13.0 into .tools/",
            )
        })
}

/// nvcc's options that choose what it writes, or where, or that make it write nothing at all:
/// `(short, long)`. um-build runs `nvcc --ptx ... -o <file>` and reads that file back, so a
/// [`Kernels::flag`](crate::Kernels::flag) naming one is refused before nvcc runs. The refusal
/// only says early what the proof of `fresh.rs` would refuse after nvcc: a compile that writes
/// no PTX of this build's check wrapper where um-build reads it.
pub(crate) const REFUSED_OPTIONS: &[(&str, &str)] = &[
    // Where the output goes.
    ("-o", "--output-file"),
    ("-odir", "--output-directory"),
    // What the output is (a phase other than `--ptx`).
    ("-E", "--preprocess"),
    ("-M", "--generate-dependencies"),
    ("-MM", "--generate-nonsystem-dependencies"),
    ("-cuda", "--cuda"),
    ("-cubin", "--cubin"),
    ("-fatbin", "--fatbin"),
    ("-optix-ir", "--optix-ir"),
    ("-ltoir", "--ltoir"),
    ("-c", "--compile"),
    ("-dc", "--device-c"),
    ("-dw", "--device-w"),
    ("-dlink", "--device-link"),
    ("-link", "--link"),
    ("-lib", "--lib"),
    ("-run", "--run"),
    ("-fdevice-syntax-only", "--fdevice-syntax-only"),
    ("-clean", "--clean-targets"),
    // Nothing compiled, exit status 0.
    ("-dryrun", "--dryrun"),
    ("-V", "--version"),
    ("-h", "--help"),
    ("-arch-ls", "--list-gpu-arch"),
    ("-code-ls", "--list-gpu-code"),
];

/// Refuses a flag that names one of [`REFUSED_OPTIONS`], by its option name: the flag up to an
/// `=` or a space, with either one or two leading dashes (nvcc takes both).
pub(crate) fn check_flags(flags: &[String]) -> Result<()> {
    for flag in flags {
        let name = flag.split(['=', ' ']).next().unwrap_or_default();
        let bare = name.trim_start_matches('-');
        if !name.starts_with('-') || bare.is_empty() {
            continue;
        }
        let refused = REFUSED_OPTIONS.iter().find(|(short, long)| {
            short.trim_start_matches('-') == bare || long.trim_start_matches('-') == bare
        });
        if let Some((short, long)) = refused {
            return Err(Error::new(format!(
                "the nvcc flag `{flag}` ({short}, {long}) changes what nvcc writes or where, \
                 and um-build reads the PTX that `--ptx -o` writes"
            ))
            .help(
                "remove the flag from Kernels::flag: um-build sets the output (`--ptx`, `-o`) \
                 itself; the PTX it checked is in $OUT_DIR/um-ptx/",
            ));
        }
    }
    Ok(())
}

/// `nvcc --ptx -arch=ARCH -O3 -I INCLUDE FLAGS -o PTX SRC`, with no file at `PTX` before it
/// runs: whatever is there afterwards, nvcc wrote in this run (or nothing is there).
pub(crate) fn compile(
    nvcc: &Path,
    arch: &str,
    include: &Path,
    flags: &[String],
    src: &Path,
    ptx: &Path,
) -> Result<()> {
    crate::fresh::remove(ptx).map_err(|e| e.in_file(src))?;
    let mut cmd = Command::new(nvcc);
    cmd.arg("--ptx")
        .arg(format!("-arch={arch}"))
        .arg("-O3")
        .arg("-I")
        .arg(include)
        .args(flags)
        .arg("-o")
        .arg(ptx)
        .arg(src);
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| Error::new(format!("cannot run nvcc: {e}\ncommand: {shown}")))?;
    if !out.status.success() {
        return Err(Error::new(format!(
            "nvcc failed ({}).\ncommand: {shown}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
        .in_file(src));
    }
    Ok(())
}
