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

/// `nvcc --ptx -arch=ARCH -O3 -I INCLUDE FLAGS -o PTX SRC`.
pub(crate) fn compile(
    nvcc: &Path,
    arch: &str,
    include: &Path,
    flags: &[String],
    src: &Path,
    ptx: &Path,
) -> Result<()> {
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
