//! Finding nvcc and compiling one `.cu` file to PTX.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The environment variables nvcc discovery reads, in order.
pub(crate) const VARS: &[&str] = &["NVCC", "CUDA_PATH", "UM_LOCAL_NVCC", "HOME", "PATH"];

/// The folder under `$HOME` where README's command installs nvcc 13.0 from PyPI
/// ([`PIP_INSTALL`]); um-build finds `nvidia/cu13/bin/nvcc` there with no variable set.
pub(crate) const HOME_TOOLKIT: &str = ".local/share/um-cuda/cuda-13.0";

/// The one command that installs nvcc where um-build finds it: the PyPI wheels of nvcc 13.0.x
/// (the pins of `um`'s `scripts/setup.sh`; 13.0 because a newer nvvm writes PTX that a CUDA 13.0
/// driver refuses), without their unpinned dependencies, into [`HOME_TOOLKIT`]. README's Quick
/// start gives the same command (`cargo xtask readme-check` compares them).
pub(crate) const PIP_INSTALL: &str = "python3 -m pip install --no-deps --only-binary=:all: \
     --target ~/.local/share/um-cuda/cuda-13.0 nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 \
     nvidia-cuda-runtime==13.0.96 nvidia-nvvm==13.0.88";

/// nvcc: `explicit`, then `$NVCC`, `$CUDA_PATH/bin/nvcc`, `/usr/local/cuda/bin/nvcc`,
/// `$UM_LOCAL_NVCC` (the copy `um`'s `scripts/setup.sh` installs), the copy README's command
/// installs (`~/.local/share/um-cuda/cuda-13.0/nvidia/cu13/bin/nvcc`), then `nvcc` on `PATH`.
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
            // Only an absolute HOME: a relative one would name a folder of the build's own.
            env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|home| home.is_absolute())
                .and_then(|home| executable(home.join(HOME_TOOLKIT).join("nvidia/cu13/bin/nvcc")))
        })
        .or_else(|| {
            env::var_os("PATH")
                .and_then(|paths| env::split_paths(&paths).find_map(|d| executable(d.join("nvcc"))))
        })
        .ok_or_else(|| {
            Error::new("nvcc not found").help(format!(
                "install nvcc 13.0 from PyPI where um-build finds it with no variable set \
                 (Debian and Ubuntu: `sudo apt-get install python3-pip g++` first):\n    \
                 {PIP_INSTALL}\n  or set NVCC to the nvcc of a CUDA toolkit of your own, for example in \
                 the `[env]` table of the crate's .cargo/config.toml. Looked for: $NVCC, \
                 $CUDA_PATH/bin/nvcc, /usr/local/cuda/bin/nvcc, $UM_LOCAL_NVCC, \
                 ~/{HOME_TOOLKIT}/nvidia/cu13/bin/nvcc, then PATH"
            ))
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

/// nvcc's options that substitute a tool of its pipeline (the host compiler, cudafe++, cicc,
/// ptxas, ...), run one through another program, hand one options of its own, or read more
/// options from a file: `(short, long)`, the hidden ones (`-Xcicc`, `--cicc-prefix`, ...)
/// included. um-build trusts the toolchain to compile the check wrapper it is given (see
/// [`Kernels::nvcc`](crate::Kernels::nvcc)): a flag that puts another program in the pipeline,
/// or tells one of its tools to read, drop or rewrite part of the wrapper (a host compiler that
/// deletes its `static_assert`s still compiles its mark), would make that trust cover code that
/// is not the toolchain's. So a [`Kernels::flag`](crate::Kernels::flag) naming one is refused
/// before nvcc runs, and so is every option whose name begins with `X` or ends with `-options`
/// or `-prefix` ([`is_tool_option`]), for those a later nvcc adds. An options file
/// (`--options-file`) could carry any refused flag, so it is refused too.
pub(crate) const TOOL_OPTIONS: &[(&str, &str)] = &[
    // Another program in the pipeline.
    ("-ccbin", "--compiler-bindir"),
    ("-arbin", "--archiver-binary"),
    ("-ldir", "--libdevice-directory"),
    ("-noprof", "--dont-use-profile"),
    ("-all-prefix", "--all-prefix"),
    ("-cpp-prefix", "--cpp-prefix"),
    ("-cicc-prefix", "--cicc-prefix"),
    ("-cudafe-prefix", "--cudafe-prefix"),
    ("-ptxas-prefix", "--ptxas-prefix"),
    ("-nvlink-prefix", "--nvlink-prefix"),
    ("-idp", "--input-drive-prefix"),
    ("-ddp", "--dependency-drive-prefix"),
    ("-dp", "--drive-prefix"),
    // Options handed to one tool.
    ("-Xcompiler", "--compiler-options"),
    ("-Xlinker", "--linker-options"),
    ("-Xarchive", "--archive-options"),
    ("-Xptxas", "--ptxas-options"),
    ("-Xnvlink", "--nvlink-options"),
    ("-Xfatbin", "--fatbin-options"),
    ("-Xcicc", "--cicc-options"),
    ("-Xcudafe", "--cudafe-options"),
    ("-Xnvvm", "--nvvm-options"),
    ("-Xnvasm", "--nvasm-options"),
    ("-Xnvdisasm", "--nvdisasm-options"),
    (
        "-forward-unknown-to-host-compiler",
        "--forward-unknown-to-host-compiler",
    ),
    (
        "-forward-unknown-to-host-linker",
        "--forward-unknown-to-host-linker",
    ),
    ("-forward-unknown-opts", "--forward-unknown-opts"),
    // Options read from a file, which may hold any of the refused ones.
    ("-optf", "--options-file"),
];

/// Whether an option name without its dashes is one of [`TOOL_OPTIONS`] by its form: `-X<tool>`,
/// `--<tool>-options`, `--<tool>-prefix`.
fn is_tool_option(bare: &str) -> bool {
    bare.starts_with('X') || bare.ends_with("-options") || bare.ends_with("-prefix")
}

/// The environment variables nvcc reads (or its `nvcc.profile` adds to a tool's command line)
/// that substitute or instruct a tool: `NVCC_CCBIN` (as `-ccbin`), `NVCC_PREPEND_FLAGS` and
/// `NVCC_APPEND_FLAGS` (flags unseen by [`check_flags`]), `CUDAFE_FLAGS` and `PTXAS_FLAGS`
/// (options of cicc and ptxas), `INCLUDES`, `SYSTEM_INCLUDES` and `LIBRARIES` (put as they are
/// on the host compiler's command line, where `-B dir` substitutes its preprocessor). They are
/// removed from nvcc's environment, so the build is the same whatever the caller exported.
pub(crate) const REMOVED_VARS: &[&str] = &[
    "NVCC_CCBIN",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "CUDAFE_FLAGS",
    "PTXAS_FLAGS",
    "INCLUDES",
    "SYSTEM_INCLUDES",
    "LIBRARIES",
];

/// Refuses a flag that names one of [`REFUSED_OPTIONS`] or [`TOOL_OPTIONS`] (or has the form of
/// one of the latter), by its option name: the flag up to an `=` or a space, with either one or
/// two leading dashes (nvcc takes both, and no abbreviation of a name).
pub(crate) fn check_flags(flags: &[String]) -> Result<()> {
    let named = |list: &'static [(&'static str, &'static str)], bare: &str| {
        list.iter()
            .find(|(short, long)| {
                short.trim_start_matches('-') == bare || long.trim_start_matches('-') == bare
            })
            .map(|(short, long)| format!(" ({short}, {long})"))
    };
    for flag in flags {
        if let Some(c) = shell_special(flag) {
            return Err(Error::new(format!(
                "the nvcc flag `{flag}` holds {c:?}, which nvcc's shell would read: nvcc runs \
                 each tool of its pipeline through `sh`, every argument in double quotes, so \
                 `$(..)` or a backquote there runs a command in the middle of the compile"
            ))
            .help(
                "remove the flag, or write its value without `$`, backquotes, double quotes, \
                 backslashes or control characters (a macro's value can come from a header \
                 instead)",
            ));
        }
        let name = flag.split(['=', ' ']).next().unwrap_or_default();
        let bare = name.trim_start_matches('-');
        if !name.starts_with('-') || bare.is_empty() {
            continue;
        }
        if let Some(names) = named(REFUSED_OPTIONS, bare) {
            return Err(Error::new(format!(
                "the nvcc flag `{flag}`{names} changes what nvcc writes or where, and um-build \
                 reads the PTX that `--ptx -o` writes"
            ))
            .help(
                "remove the flag from Kernels::flag: um-build sets the output (`--ptx`, `-o`) \
                 itself; the PTX it checked is in $OUT_DIR/um-ptx/",
            ));
        }
        let tool = named(TOOL_OPTIONS, bare);
        if tool.is_some() || is_tool_option(bare) {
            return Err(Error::new(format!(
                "the nvcc flag `{flag}`{} substitutes or instructs a tool of nvcc's pipeline, or \
                 reads options from a file, and um-build embeds only what nvcc's own pipeline \
                 makes of its check wrapper",
                tool.unwrap_or_default()
            ))
            .help(
                "remove the flag from Kernels::flag: nvcc runs its own tools and the host \
                 compiler found on PATH; pass macros and include paths as -D and -I, and each \
                 option of an options file as a Kernels::flag of its own",
            ));
        }
    }
    Ok(())
}

/// The first character of `text` that `sh` reads inside double quotes (`$`, a backquote, `"`,
/// `\\`) or that ends or breaks a command line (a control character): nvcc puts every argument
/// it is given, and the temporary folder it reads from `TMPDIR`, on its tools' command lines
/// in double quotes for `sh`.
pub(crate) fn shell_special(text: &str) -> Option<char> {
    text.chars()
        .find(|c| matches!(c, '$' | '`' | '"' | '\\') || c.is_control())
}

/// Refuses a path nvcc would hand its shell with a character the shell reads ([`shell_special`]).
fn check_path(what: &str, path: &Path) -> Result<()> {
    let text = path.to_string_lossy();
    match shell_special(&text) {
        Some(c) => Err(Error::new(format!(
            "the {what} {} holds {c:?}, which nvcc's shell would read: nvcc passes it to its \
             tools through `sh` in double quotes",
            path.display()
        ))
        .help(
            "build into a folder whose path has no `$`, backquote, double quote, backslash or \
             control character (Kernels::out_dir, or cargo's OUT_DIR and the kernel folder)",
        )),
        None => Ok(()),
    }
}

/// `nvcc --ptx -arch=ARCH -O3 -I INCLUDE FLAGS -o PTX SRC`, with no file at `PTX` before it
/// runs: whatever is there afterwards, nvcc wrote in this run (or nothing is there). nvcc runs
/// without [`REMOVED_VARS`] in its environment.
pub(crate) fn compile(
    nvcc: &Path,
    arch: &str,
    include: &Path,
    flags: &[String],
    src: &Path,
    ptx: &Path,
) -> Result<()> {
    crate::fresh::remove(ptx).map_err(|e| e.in_file(src))?;
    // nvcc's temporary files go to a folder of this build's own, under the output folder: the
    // caller's `TMPDIR` is put on the tools' command lines too.
    let tmp = ptx
        .parent()
        .map_or_else(|| PathBuf::from("nvcc-tmp"), |d| d.join("nvcc-tmp"));
    for (what, path) in [
        ("include folder", include),
        ("PTX file", ptx),
        ("check wrapper", src),
        ("temporary folder", tmp.as_path()),
    ] {
        check_path(what, path).map_err(|e| e.in_file(src))?;
    }
    if let Some(c) = shell_special(arch) {
        return Err(Error::new(format!(
            "the architecture `{arch}` holds {c:?}, which nvcc's shell would read"
        )));
    }
    std::fs::create_dir_all(&tmp)
        .map_err(|e| Error::new(format!("cannot make {}: {e}", tmp.display())).in_file(src))?;
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
    for var in REMOVED_VARS {
        cmd.env_remove(var);
    }
    cmd.env("TMPDIR", &tmp);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(flags: &[&str]) -> Result<()> {
        check_flags(&flags.iter().map(|f| (*f).to_owned()).collect::<Vec<_>>())
    }

    /// A flag holding a character that nvcc's shell reads inside double quotes is refused,
    /// whatever the option; flags without one pass.
    #[test]
    fn flags_with_what_nvccs_shell_reads_are_refused() {
        for flag in [
            "-DA=$(true)",
            "-DA=`true`",
            "-DA=\"x\"",
            "-DA=\\x",
            "-DA=1\n-ccbin",
        ] {
            let err = check(&[flag]).expect_err(flag);
            assert!(err.to_string().contains("nvcc's shell would read"), "{err}");
        }
        assert!(check(&["-DA=1", "-Ipath/with spaces", "-lineinfo", "-DB='q'"]).is_ok());
    }

    /// Every option that substitutes or instructs a tool, in each spelling nvcc takes, is
    /// refused, and so are those of their form that this nvcc does not have.
    #[test]
    fn flags_that_substitute_or_instruct_a_tool_are_refused() {
        let says = "substitutes or instructs a tool";
        let mut spellings = Vec::new();
        for (short, long) in TOOL_OPTIONS {
            let bare = long.trim_start_matches('-');
            spellings.extend([
                (*short).to_owned(),
                (*long).to_owned(),
                format!("-{bare}"),
                format!("{long}=x"),
                format!("{short} x"),
            ]);
        }
        spellings.extend(
            [
                "-Xnew",
                "--new-options=-v",
                "--new-prefix",
                "-ccbin=/usr/bin",
            ]
            .map(String::from),
        );
        for flag in &spellings {
            let e = check(&["-DA=1", flag]).expect_err(flag);
            assert!(e.message().contains(says), "{flag}: {e}");
            assert!(e.message().contains(flag.as_str()), "{flag}: {e}");
        }
        for (flag, names) in [
            ("-ccbin", "(-ccbin, --compiler-bindir)"),
            ("--options-file=o.txt", "(-optf, --options-file)"),
            ("-Xcompiler", "(-Xcompiler, --compiler-options)"),
        ] {
            let e = check(&[flag]).expect_err(flag);
            assert!(e.message().contains(names), "{e}");
        }
    }

    #[test]
    fn flags_that_keep_the_pipeline_pass() {
        let allowed = [
            "-DFOO",
            "-DX=-ccbin",
            "-I",
            "/inc",
            "-isystem",
            "/sys",
            "-include",
            "pre.h",
            "-G",
            "-lineinfo",
            "--use_fast_math",
            "-x",
            "c++",
            "-Wno-deprecated-gpu-targets",
            "-rdc=true",
            "-std=c++17",
            "--keep",
            "-maxrregcount=32",
            "-allow-unsupported-compiler",
            "-target-dir",
            "x86_64-linux",
        ];
        assert_eq!(check(&allowed), Ok(()));
    }
}
