//! A launcher embeds only PTX compiled from its own checked wrapper in this build.
//!
//! Every file um-build reads back, or leaves for `include_kernels!` to read, is made by this build
//! or refused: nvcc's PTX (removed before nvcc runs, and carrying this build's mark, a symbol
//! named at random that only the check wrapper defines), the PTX copied to `um-ptx/`, the
//! generated Rust (removed when the build starts, written last, and holding the PTX text
//! itself), the wrapper and `um.cuh` (written as new files, never through what lies there).
//!
//! Each row plants a stale artefact (an earlier build of another kernel of the same name into
//! the same output folder: `k(double *, len32)` before `k(float *, len32)`), then builds in a
//! way that would read it, and checks that the build refuses or that what it embeds is this
//! build's PTX. The nvcc rows need nvcc (`$UM_LOCAL_NVCC` from `.cargo/config.toml` here), as
//! every build of um does; the prebuilt rows run in a child process without one.
#![cfg(unix)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A kernel `k` over a buffer of `ty`.
fn kernel(ty: &str) -> String {
    format!(
        "#include \"um.cuh\"\nUM_SAFE_KERNEL void k({ty} *x, um::len32 n) {{ for (auto i : um::indices(n)) x[i] = x[i] * 3; }}\n"
    )
}

/// A fresh folder: `a/k.cu` (double), `b/k.cu` (float), `out/`.
fn fresh() -> PathBuf {
    let root = std::env::temp_dir().join(format!(
        "um-build-fresh-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&root);
    for (dir, ty) in [("a", "double"), ("b", "float")] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("k.cu"), kernel(ty)).unwrap();
    }
    std::fs::create_dir_all(root.join("out")).unwrap();
    root
}

/// The nvcc um-build finds, in its order (for the stand-ins that run it).
fn real_nvcc() -> PathBuf {
    let env = |v: &str| std::env::var_os(v).map(PathBuf::from);
    [
        env("NVCC"),
        env("CUDA_PATH").map(|d| d.join("bin/nvcc")),
        Some(PathBuf::from("/usr/local/cuda/bin/nvcc")),
        env("UM_LOCAL_NVCC"),
    ]
    .into_iter()
    .flatten()
    .chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join("nvcc")),
    )
    .find(|p| p.is_file())
    .expect("nvcc: set NVCC, or run scripts/setup.sh")
}

/// An executable shell script at `root/name`.
fn script(root: &Path, name: &str, body: &str) -> PathBuf {
    let path = root.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The PTX text the generated file embeds for module `k`: the string literal of its `PTX`
/// static.
fn embedded(code: &str) -> String {
    let line = code
        .lines()
        .find_map(|l| l.strip_prefix("pub static PTX: &str = "))
        .unwrap_or_else(|| panic!("no PTX static:\n{code}"));
    let literal = line.strip_suffix(';').unwrap();
    unescape(literal).unwrap_or_else(|| panic!("not a string literal this test reads: {literal}"))
}

/// A Rust string literal as `{:?}` writes one (the escapes of `str::escape_debug`).
fn unescape(literal: &str) -> Option<String> {
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0' => out.push('\0'),
            '\\' => out.push('\\'),
            '"' => out.push('"'),
            '\'' => out.push('\''),
            'u' => {
                let rest: String = chars.by_ref().take_while(|c| *c != '}').collect();
                let hex = rest.strip_prefix('{')?;
                out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// How the second build of a row goes wrong.
enum Twist {
    /// `Kernels::flag`s.
    Flags(&'static [&'static str]),
    /// An nvcc of the row's making: a shell script body, `$REAL` the real nvcc, `$STALE` the
    /// PTX the first build wrote, `$USER_FILE` the `.cu` file, `$OUT` the output folder.
    Nvcc(&'static str),
    /// `Kernels::nvcc` set to this path.
    NvccPath(&'static str),
}

/// A row: a first build of `a/k.cu` (double) into `out/`, then a build of `b/k.cu` (float), or
/// of `a/k.cu` edited to float when `same_folder`, into the same `out/` with `twist`. It must
/// be refused, with a message that contains `says`, and leave no generated file.
struct Refused {
    name: &'static str,
    same_folder: bool,
    twist: Twist,
    says: &'static str,
}

const REFUSED: &[Refused] = &[
    // The reproducer: two kernel folders, one output folder, the second built with `--dryrun`
    // (nvcc exits 0 and writes nothing). It embedded the double kernel behind `&mut [f32]`.
    Refused {
        name: "two folders, the second with --dryrun",
        same_folder: false,
        twist: Twist::Flags(&["--dryrun"]),
        says: "--dryrun",
    },
    Refused {
        name: "one folder whose kernel changed, rebuilt with --dryrun",
        same_folder: true,
        twist: Twist::Flags(&["--dryrun"]),
        says: "--dryrun",
    },
    Refused {
        name: "--version",
        same_folder: false,
        twist: Twist::Flags(&["--version"]),
        says: "--version",
    },
    Refused {
        name: "--help",
        same_folder: false,
        twist: Twist::Flags(&["--help"]),
        says: "--help",
    },
    Refused {
        name: "-E (preprocessed text where the PTX goes)",
        same_folder: false,
        twist: Twist::Flags(&["-E"]),
        says: "-E",
    },
    Refused {
        name: "-M (dependencies where the PTX goes)",
        same_folder: false,
        twist: Twist::Flags(&["-M"]),
        says: "-M",
    },
    Refused {
        name: "-o elsewhere",
        same_folder: false,
        twist: Twist::Flags(&["-o", "/dev/null"]),
        says: "-o",
    },
    Refused {
        name: "--output-file=elsewhere",
        same_folder: false,
        twist: Twist::Flags(&["--output-file=/dev/null"]),
        says: "--output-file",
    },
    Refused {
        name: "-odir",
        same_folder: false,
        twist: Twist::Flags(&["-odir", "/tmp"]),
        says: "-odir",
    },
    Refused {
        name: "-optix-ir (binary where the PTX goes)",
        same_folder: false,
        twist: Twist::Flags(&["-optix-ir"]),
        says: "-optix-ir",
    },
    Refused {
        name: "-cubin",
        same_folder: false,
        twist: Twist::Flags(&["-cubin"]),
        says: "-cubin",
    },
    // Below, the refusal cannot come from reading the flags: only the proof can refuse.
    Refused {
        name: "an nvcc that is /bin/true",
        same_folder: false,
        twist: Twist::NvccPath("/bin/true"),
        says: "wrote no PTX",
    },
    Refused {
        name: "an nvcc that runs with --dryrun",
        same_folder: false,
        twist: Twist::Nvcc("exec \"$REAL\" --dryrun \"$@\""),
        says: "wrote no PTX",
    },
    Refused {
        name: "an nvcc that runs with --version",
        same_folder: false,
        twist: Twist::Nvcc("exec \"$REAL\" --version \"$@\""),
        says: "wrote no PTX",
    },
    Refused {
        name: "an nvcc that preprocesses (-E): the mark's name in C++ text",
        same_folder: false,
        twist: Twist::Nvcc("exec \"$REAL\" \"$@\" -E"),
        says: "is not PTX",
    },
    Refused {
        name: "an nvcc that replays the earlier build's PTX",
        same_folder: false,
        twist: Twist::Nvcc(
            "while [ $# -gt 1 ]; do if [ \"$1\" = -o ]; then out=$2; fi; shift; done\ncp \"$STALE\" \"$out\"",
        ),
        says: "not the PTX of this build's check wrapper",
    },
    Refused {
        name: "an nvcc that compiles the kernel file instead of the check wrapper",
        same_folder: false,
        twist: Twist::Nvcc(
            "while [ $# -gt 1 ]; do if [ \"$1\" = -o ]; then out=$2; fi; shift; done\nexec \"$REAL\" --ptx -arch=compute_75 -I \"$OUT/um-include\" -o \"$out\" \"$USER_FILE\"",
        ),
        says: "not the PTX of this build's check wrapper",
    },
];

#[test]
fn a_compile_that_writes_no_fresh_ptx_of_its_wrapper_is_refused() {
    let real = real_nvcc();
    let mut failures = Vec::new();
    for row in REFUSED {
        let root = fresh();
        let out = root.join("out");
        // The earlier build: the double kernel, with every artefact it leaves.
        um_build::Kernels::new(root.join("a"))
            .out_dir(&out)
            .build()
            .unwrap_or_else(|e| panic!("{}: the first build failed: {e}", row.name));
        let stale = root.join("stale.ptx");
        std::fs::copy(out.join("um-ptx/k.ptx"), &stale).unwrap();
        assert!(std::fs::read_to_string(&stale).unwrap().contains(".f64"));
        let dir = if row.same_folder {
            std::fs::write(root.join("a/k.cu"), kernel("float")).unwrap();
            root.join("a")
        } else {
            root.join("b")
        };
        let mut k = um_build::Kernels::new(&dir).out_dir(&out);
        match &row.twist {
            Twist::Flags(flags) => {
                for f in *flags {
                    k = k.flag(f);
                }
            }
            Twist::NvccPath(path) => k = k.nvcc(path),
            Twist::Nvcc(body) => {
                let vars = format!(
                    "REAL='{}'\nSTALE='{}'\nUSER_FILE='{}'\nOUT='{}'\n",
                    real.display(),
                    stale.display(),
                    dir.join("k.cu").display(),
                    out.display()
                );
                k = k.nvcc(script(&root, "nvcc", &format!("{vars}{body}")));
            }
        }
        match k.build() {
            Ok(built) => {
                let code = std::fs::read_to_string(&built.generated).unwrap_or_default();
                failures.push(format!(
                    "{}: built, embedding {}",
                    row.name,
                    if code.contains(".f64") || embedded_is_f64(&out) {
                        "the earlier build's double kernel"
                    } else {
                        "some PTX"
                    }
                ));
            }
            Err(e) => {
                let shown = e.to_string();
                if !shown.contains(row.says) {
                    failures.push(format!(
                        "{}: refused without `{}`:\n{shown}",
                        row.name, row.says
                    ));
                }
                if e.file().is_none() {
                    failures.push(format!("{}: the refusal names no file:\n{shown}", row.name));
                }
                // Nothing for `include_kernels!` to include: the earlier build's file is gone.
                if out.join(um_build::GENERATED_FILE).exists() {
                    failures.push(format!("{}: a generated file is left", row.name));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&root);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether `out/um-ptx/k.ptx` is the double kernel's.
fn embedded_is_f64(out: &Path) -> bool {
    std::fs::read_to_string(out.join("um-ptx/k.ptx")).is_ok_and(|p| p.contains(".f64"))
}

/// A planted file that an honest build must replace, not read or write through.
struct Planted {
    name: &'static str,
    /// Relative to `out/`.
    path: &'static str,
    /// Planted as a link to a decoy file (`true`) or as a stale file.
    link: bool,
}

const PLANTED: &[Planted] = &[
    Planted {
        name: "the earlier build's checked PTX",
        path: "um-ptx/k.ptx",
        link: false,
    },
    Planted {
        name: "the earlier build's raw nvcc output",
        path: "um-check/k.ptx",
        link: false,
    },
    Planted {
        name: "the earlier build's generated file",
        path: um_build::GENERATED_FILE,
        link: false,
    },
    Planted {
        name: "a link where the checked PTX goes",
        path: "um-ptx/k.ptx",
        link: true,
    },
    Planted {
        name: "a link where the check wrapper goes",
        path: "um-check/k.cu",
        link: true,
    },
    Planted {
        name: "a link where um.cuh goes",
        path: "um-include/um.cuh",
        link: true,
    },
    Planted {
        name: "a link where the generated file goes",
        path: um_build::GENERATED_FILE,
        link: true,
    },
];

#[test]
fn an_honest_build_replaces_every_planted_artefact() {
    let mut failures = Vec::new();
    for row in PLANTED {
        let root = fresh();
        let out = root.join("out");
        um_build::Kernels::new(root.join("a"))
            .out_dir(&out)
            .build()
            .unwrap_or_else(|e| panic!("{}: the first build failed: {e}", row.name));
        let decoy = root.join("decoy");
        let planted = out.join(row.path);
        let earlier = std::fs::read(&planted).unwrap_or_default();
        if row.link {
            std::fs::write(&decoy, &earlier).unwrap();
            let _ = std::fs::remove_file(&planted);
            std::os::unix::fs::symlink(&decoy, &planted).unwrap();
        }
        let built = um_build::Kernels::new(root.join("b"))
            .out_dir(&out)
            .build()
            .unwrap_or_else(|e| panic!("{}: the honest build failed: {e}", row.name));
        let code = std::fs::read_to_string(&built.generated).unwrap();
        let ptx = embedded(&code);
        let checked = std::fs::read_to_string(out.join("um-ptx/k.ptx")).unwrap();
        if ptx.contains(".f64") || !ptx.contains(".visible .entry k(") {
            failures.push(format!(
                "{}: the launcher embeds other PTX than b's",
                row.name
            ));
        }
        if ptx != checked {
            failures.push(format!(
                "{}: the embedded PTX is not um-ptx/k.ptx",
                row.name
            ));
        }
        if row.link {
            if std::fs::read(&decoy).unwrap() != earlier {
                failures.push(format!("{}: the build wrote through the link", row.name));
            }
            if std::fs::symlink_metadata(&planted)
                .unwrap()
                .file_type()
                .is_symlink()
            {
                failures.push(format!("{}: the link is still there", row.name));
            }
        }
        let _ = std::fs::remove_dir_all(&root);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The mark is drawn anew for every build, and taken out of the PTX again: what a launcher
/// embeds is nvcc's output without that one line, after the line of its inputs (the documented
/// hash of the `.cu` file, `um.cuh`, the architecture and the flags), the same in every build
/// (um-kernels ships it and compares).
#[test]
fn the_embedded_ptx_is_nvccs_without_only_the_mark_and_the_same_in_every_build() {
    let root = fresh();
    let out = root.join("out");
    let mut marks = Vec::new();
    let mut embedded_texts = Vec::new();
    for _ in 0..2 {
        let built = um_build::Kernels::new(root.join("b"))
            .out_dir(&out)
            .build()
            .expect("builds");
        let raw = std::fs::read_to_string(out.join("um-check/k.ptx")).unwrap();
        let wrapper = std::fs::read_to_string(out.join("um-check/k.cu")).unwrap();
        let marked: Vec<&str> = raw
            .lines()
            .filter(|l| l.contains("um_build_fresh_"))
            .collect();
        assert_eq!(marked.len(), 1, "{raw}");
        let mark = marked[0]
            .split_whitespace()
            .find(|w| w.starts_with("um_build_fresh_"))
            .unwrap()
            .to_owned();
        assert_eq!(marked[0], format!(".global .align 4 .u32 {mark} = 1;"));
        assert!(
            wrapper.contains(&format!("unsigned int {mark} = 1u;")),
            "{wrapper}"
        );
        // nvcc's text without the mark, after the line of what it was built from.
        let without: String = raw
            .split_inclusive('\n')
            .filter(|l| !l.contains(&mark))
            .collect();
        let without = format!(
            "{}\n{without}",
            common::inputs_line(&kernel("float"), "compute_75", &[])
        );
        let code = std::fs::read_to_string(&built.generated).unwrap();
        let ptx = embedded(&code);
        assert_eq!(ptx, without);
        assert_eq!(
            std::fs::read_to_string(out.join("um-ptx/k.ptx")).unwrap(),
            without
        );
        marks.push(mark);
        embedded_texts.push(ptx);
    }
    assert_ne!(marks[0], marks[1]);
    assert_eq!(embedded_texts[0], embedded_texts[1]);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn flags_that_keep_the_output_ptx_still_work() {
    let root = fresh();
    std::fs::write(
        root.join("b/k.cu"),
        "#include \"um.cuh\"\n#include \"extra.cuh\"\nUM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = ONE; }\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("inc")).unwrap();
    std::fs::write(
        root.join("inc/extra.cuh"),
        "#ifndef FOO\n#error FOO\n#endif\n#define ONE 1.0f\n",
    )
    .unwrap();
    let built = um_build::Kernels::new(root.join("b"))
        .out_dir(root.join("out"))
        .flag("-DFOO")
        .flag("-I")
        .flag(root.join("inc").to_str().unwrap())
        .flag("--use_fast_math")
        .flag("-lineinfo")
        .build()
        .expect("-D, -I and flags that keep PTX as the output build");
    let code = std::fs::read_to_string(&built.generated).unwrap();
    assert!(embedded(&code).contains(".visible .entry k("));
    // Under -G the debug sections name the mark too: the PTX is kept whole, mark and all (an
    // unused variable), and builds.
    let built = um_build::Kernels::new(root.join("b"))
        .out_dir(root.join("out"))
        .flag("-DFOO")
        .flag("-I")
        .flag(root.join("inc").to_str().unwrap())
        .flag("-G")
        .build()
        .expect("-G builds");
    let code = std::fs::read_to_string(&built.generated).unwrap();
    let ptx = embedded(&code);
    assert!(ptx.contains(".visible .entry k(") && ptx.contains("um_build_fresh_"));
    let _ = std::fs::remove_dir_all(&root);
}

// ------------------------------------------------------------------------------------------
// Prebuilt PTX, without nvcc: the copy in `um-ptx/` and the generated file are this build's.

/// What nvcc 13.0 writes for `kernel("float")` (the body shortened).
const NVCC_PTX: &str = "//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 9.0\n.target sm_75\n\
                        .address_size 64\n\n.visible .entry k(\n\t.param .u64 k_param_0,\n\
                        \t.param .align 4 .b8 k_param_1[4]\n)\n{\n\tret;\n}\n";

/// `NVCC_PTX` as um-build writes it: the line of its inputs first.
fn prebuilt() -> String {
    format!(
        "{}\n{NVCC_PTX}",
        common::inputs_line(&kernel("float"), "compute_75", &[])
    )
}

/// One prebuilt row, in the child: plants `out/um-ptx/k.ptx` and `out/um_kernels.rs` from an
/// earlier build of the double kernel, builds `b/` with `prebuilt_ptx`, and prints the outcome.
fn prebuilt_case(case: &str) {
    let root = fresh();
    let (out, ptx) = (root.join("out"), root.join("ptx"));
    std::fs::create_dir_all(out.join("um-ptx")).unwrap();
    std::fs::create_dir_all(&ptx).unwrap();
    let stale_ptx = prebuilt().replace(".u64 k_param_0", ".u64 k_param_0 // .f64");
    std::fs::write(out.join("um-ptx/k.ptx"), &stale_ptx).unwrap();
    std::fs::write(
        out.join(um_build::GENERATED_FILE),
        "// the earlier build's\n",
    )
    .unwrap();
    match case {
        "uses" => std::fs::write(ptx.join("k.ptx"), prebuilt()).unwrap(),
        "missing" => {}
        "mismatch" => std::fs::write(
            ptx.join("k.ptx"),
            prebuilt().replace("\t.param .align 4 .b8 k_param_1[4]\n", ""),
        )
        .unwrap(),
        other => panic!("no case {other}"),
    }
    let kernels = um_build::Kernels::new(root.join("b")).out_dir(&out);
    // SAFETY: not kept by "mismatch", to see the build refuse it; the generated launchers are
    // only read as text, never compiled nor launched.
    let result = unsafe { kernels.prebuilt_ptx(&ptx) }.build();
    let generated = std::fs::read_to_string(out.join(um_build::GENERATED_FILE)).ok();
    let copy = std::fs::read_to_string(out.join("um-ptx/k.ptx")).ok();
    match result {
        Ok(_) => {
            let code = generated.unwrap_or_default();
            println!(
                "CASE built: copy is the prebuilt {}, embedded is the prebuilt {}",
                copy == Some(prebuilt()),
                code.lines().any(|l| l.starts_with("pub static PTX"))
                    && embedded(&code) == prebuilt()
            );
        }
        Err(_) => println!(
            "CASE refused: generated left {}, stale copy left {}",
            generated.is_some(),
            copy.as_deref() == Some(stale_ptx.as_str())
        ),
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The child's entry point: does nothing unless the parent set `UM_FRESH_PREBUILT_CASE`.
#[test]
fn prebuilt_child() {
    if let Ok(case) = std::env::var("UM_FRESH_PREBUILT_CASE") {
        prebuilt_case(&case);
    }
}

/// Runs `case` in a child that finds no nvcc: what it said, or None where nvcc cannot be hidden.
fn without_nvcc(case: &str) -> Option<String> {
    common::without_nvcc("prebuilt_child", "UM_FRESH_PREBUILT_CASE", case)
        .map(|stdout| common::said(&stdout).to_owned())
}

#[test]
fn prebuilt_ptx_is_copied_and_embedded_as_read_and_a_failed_build_leaves_nothing_stale() {
    for (case, want) in [
        (
            "uses",
            "built: copy is the prebuilt true, embedded is the prebuilt true",
        ),
        (
            "missing",
            "refused: generated left false, stale copy left false",
        ),
        (
            "mismatch",
            "refused: generated left false, stale copy left false",
        ),
    ] {
        let Some(said) = without_nvcc(case) else {
            return;
        };
        assert_eq!(said, want, "{case}");
    }
}

// ------------------------------------------------------------------------------------------
// The toolchain around the wrapper: no flag, and no variable of nvcc's environment, puts another
// program or its own options into the pipeline that compiles the wrapper. The toolchain itself
// (the nvcc run, its tools, the host compiler on PATH) is trusted, as `Kernels::nvcc` says.

/// Whether generated `code` launches a kernel of element type `f64` behind a launcher of `f32`
/// buffers: the launcher's buffer type against the PTX it embeds.
fn double_kernel_behind_a_float_launcher(code: &str) -> bool {
    let ptx = embedded(code);
    code.contains("__um::Managed<[f32]") && ptx.contains(".f64")
}

/// A host compiler of the caller's (a folder holding a `gcc` that runs gcc and then, on the
/// preprocessed check wrapper, drops the `static_assert`s and turns the kernel's `float *x` into
/// `double *x`): the wrapper's mark is still there and its checks are not, so PTX of the double
/// kernel would carry this build's mark. Returns the folder.
fn rewriting_host_compiler(root: &Path) -> PathBuf {
    let gcc = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("gcc"))
        .find(|p| p.is_file())
        .expect("gcc, nvcc's host compiler");
    let bin = root.join("host");
    std::fs::create_dir_all(&bin).unwrap();
    script(
        &bin,
        "gcc",
        &format!(
            "out=; pre=; prev=\n\
             for a in \"$@\"; do\n\
             \x20 if [ \"$prev\" = -o ]; then out=$a; fi\n\
             \x20 if [ \"$a\" = -E ]; then pre=1; fi\n\
             \x20 prev=$a\n\
             done\n\
             '{}' \"$@\" || exit $?\n\
             if [ -n \"$pre\" ] && [ -n \"$out\" ] && grep -q um_build_fresh_ \"$out\"; then\n\
             \x20 sed -i -e '/^static_assert(/d' -e 's/void k(float \\*x/void k(double *x/' \"$out\"\n\
             fi",
            gcc.display()
        ),
    );
    bin
}

/// A host compiler given through an nvcc flag (`-ccbin`, `--compiler-bindir`, or any option that
/// substitutes or instructs a tool) is refused before nvcc runs: it could rewrite the check
/// wrapper (above) and still compile its mark.
#[test]
fn a_flag_that_substitutes_the_host_compiler_is_refused() {
    let root = fresh();
    let out = root.join("out");
    let bin = rewriting_host_compiler(&root);
    let bin = bin.to_str().unwrap();
    for flags in [
        vec!["-ccbin", bin],
        vec!["-ccbin", &format!("{bin}/gcc")],
        vec!["--compiler-bindir", bin],
        vec![&format!("--compiler-bindir={bin}")],
        vec!["-Xcompiler", &format!("-B{bin}")],
        vec!["--forward-unknown-to-host-compiler", &format!("-B{bin}")],
        vec!["--cpp-prefix", &format!("{bin}/gcc")],
    ] {
        let mut k = um_build::Kernels::new(root.join("b")).out_dir(&out);
        for f in &flags {
            k = k.flag(f);
        }
        let e = k.build().expect_err(&flags.join(" "));
        assert!(
            e.to_string().contains("substitutes or instructs a tool"),
            "{flags:?}: {e}"
        );
        assert!(!out.join(um_build::GENERATED_FILE).exists());
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The child's entry point: does nothing unless the parent set `UM_FRESH_HOST_ROOT`, the folder
/// of a `fresh()` tree. Builds `b/` (float) into its `out/` and says what the launcher embeds.
#[test]
fn host_compiler_child() {
    let Some(root) = std::env::var_os("UM_FRESH_HOST_ROOT").map(PathBuf::from) else {
        return;
    };
    match um_build::Kernels::new(root.join("b"))
        .out_dir(root.join("out"))
        .build()
    {
        Ok(built) => {
            let code = std::fs::read_to_string(&built.generated).unwrap();
            println!(
                "CASE built: double kernel behind a float launcher {}",
                double_kernel_behind_a_float_launcher(&code)
            );
        }
        Err(e) => println!("CASE refused: {}", e.to_string().replace('\n', " | ")),
    }
}

/// The same host compiler named in nvcc's environment (`NVCC_CCBIN`, or `-ccbin` in
/// `NVCC_PREPEND_FLAGS` or `NVCC_APPEND_FLAGS`), which no flag shows: um-build removes those
/// variables from nvcc's environment, so nvcc runs the host compiler on `PATH`, and the build
/// embeds the float kernel behind its float launcher. Each runs in a child process with the
/// variable set (the environment is the process's).
#[test]
fn a_host_compiler_named_in_nvccs_environment_is_not_used() {
    let root = fresh();
    let bin = rewriting_host_compiler(&root);
    let ccbin = format!("-ccbin {}", bin.display());
    let mut failures = Vec::new();
    for (var, value) in [
        ("NVCC_CCBIN", bin.display().to_string()),
        ("NVCC_PREPEND_FLAGS", ccbin.clone()),
        ("NVCC_APPEND_FLAGS", ccbin),
    ] {
        let _ = std::fs::remove_dir_all(root.join("out"));
        std::fs::create_dir_all(root.join("out")).unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "host_compiler_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("UM_FRESH_HOST_ROOT", &root)
            .env(var, &value)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let said = stdout.lines().find_map(|l| l.strip_prefix("CASE "));
        if said != Some("built: double kernel behind a float launcher false") {
            failures.push(format!(
                "{var}={value}: {said:?}\n{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Flags um-build does not name, spelled otherwise or read from files, that move nvcc's output,
/// stop it, add code before the wrapper or redefine what the wrapper uses: each build is refused,
/// or embeds the PTX of `b/k.cu` (float) behind its float launcher, never the earlier build's
/// double kernel.
#[test]
fn flags_spelled_otherwise_or_read_from_files_embed_only_the_wrappers_ptx() {
    let mut failures = Vec::new();
    let root = fresh();
    let files = root.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let options = |name: &str, text: &str| {
        let p = files.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let stale_kernel = root.join("a/k.cu").display().to_string();
    let rows: Vec<(&str, Vec<String>)> = vec![
        ("-o attached", vec!["-o/dev/null".into()]),
        ("-o=", vec!["-o=/dev/null".into()]),
        (
            "an options file with -o",
            vec!["--options-file".into(), options("o.txt", "-o /dev/null\n")],
        ),
        (
            "an options file with --dryrun",
            vec!["-optf".into(), options("dry.txt", "--dryrun\n")],
        ),
        (
            "an options file with -E",
            vec!["--options-file".into(), options("e.txt", "-E\n")],
        ),
        ("-Xcompiler -dM", vec!["-Xcompiler".into(), "-dM".into()]),
        (
            "--keep into a folder",
            vec![
                "--keep".into(),
                "--keep-dir".into(),
                files.display().to_string(),
            ],
        ),
        (
            "-include the earlier kernel",
            vec!["-include".into(), stale_kernel.clone()],
        ),
        (
            "--pre-include the earlier kernel",
            vec!["--pre-include".into(), stale_kernel.clone()],
        ),
        ("-Dfloat=double", vec!["-Dfloat=double".into()]),
        (
            "-Dfloat=double with static_assert defined away",
            vec![
                "-Dfloat=double".into(),
                "-Dstatic_assert(...)=".into(),
                "-Dsizeof(x)=4".into(),
            ],
        ),
        (
            "-Ufloat -U__CUDA_ARCH__",
            vec!["-Ufloat".into(), "-U__CUDA_ARCH__".into()],
        ),
        ("-Xptxas -v", vec!["-Xptxas".into(), "-v".into()]),
        ("-arch again", vec!["-arch=compute_90".into()]),
        ("-rdc=true", vec!["-rdc=true".into()]),
        ("-x c++", vec!["-x".into(), "c++".into()]),
        ("-dlto", vec!["-dlto".into()]),
        (
            "-Wno-deprecated-gpu-targets",
            vec!["-Wno-deprecated-gpu-targets".into()],
        ),
    ];
    for (name, flags) in &rows {
        let out = root.join("out");
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        um_build::Kernels::new(root.join("a"))
            .out_dir(&out)
            .build()
            .unwrap_or_else(|e| panic!("{name}: the first build failed: {e}"));
        let mut k = um_build::Kernels::new(root.join("b")).out_dir(&out);
        for f in flags {
            k = k.flag(f);
        }
        match k.build() {
            Ok(built) => {
                let code = std::fs::read_to_string(&built.generated).unwrap();
                let ptx = embedded(&code);
                if ptx.contains(".f64") || !ptx.contains(".visible .entry k(") {
                    failures.push(format!("{name}: built, embedding other PTX than b's"));
                }
            }
            Err(e) => {
                if out.join(um_build::GENERATED_FILE).exists() {
                    failures.push(format!("{name}: refused ({e}), a generated file is left"));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Builds of two folders into one output folder at once (two threads of one build script):
/// wrappers, nvcc outputs and PTX copies share their paths, and each build removes the other's
/// files. Each build is refused, or what it leaves embeds PTX of the element type its launcher
/// takes.
#[test]
fn builds_into_one_folder_at_once_embed_only_their_own_ptx() {
    let root = fresh();
    let out = root.join("out");
    let consistent = |code: &str| {
        // A generated file read while the other build rewrites it may be cut short.
        if !code.contains("pub const PTX_ARCH") {
            return true;
        }
        let ptx = embedded(code);
        (code.contains("__um::Managed<[f64]") == ptx.contains(".f64"))
            && (code.contains("__um::Managed<[f32]") == ptx.contains(".f32"))
    };
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|dir| {
                let (root, out) = (&root, &out);
                s.spawn(move || {
                    let mut failures = Vec::new();
                    for _ in 0..4 {
                        if let Ok(built) =
                            um_build::Kernels::new(root.join(dir)).out_dir(out).build()
                        {
                            let code =
                                std::fs::read_to_string(&built.generated).unwrap_or_default();
                            if !consistent(&code) {
                                failures.push(format!("{dir}: a launcher embeds another kernel"));
                            }
                        }
                    }
                    failures
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    if let Ok(code) = std::fs::read_to_string(out.join(um_build::GENERATED_FILE)) {
        assert!(
            consistent(&code),
            "the last generated file embeds another kernel"
        );
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Two files of one folder with a kernel of one name: each module embeds its own file's PTX.
#[test]
fn kernels_of_one_name_in_two_files_each_embed_their_own_ptx() {
    let root = fresh();
    let dir = root.join("both");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("d.cu"), kernel("double")).unwrap();
    std::fs::write(dir.join("f.cu"), kernel("float")).unwrap();
    let built = um_build::Kernels::new(&dir)
        .out_dir(root.join("out"))
        .build()
        .expect("two modules");
    let code = std::fs::read_to_string(&built.generated).unwrap();
    let _ = std::fs::remove_dir_all(&root);
    let module = |name: &str| {
        let start = code.find(&format!("pub mod {name} {{")).unwrap();
        let rest = &code[start..];
        let end = rest[1..].find("pub mod ").map_or(rest.len(), |i| i + 1);
        rest[..end].to_owned()
    };
    let (d, f) = (module("d"), module("f"));
    assert!(d.contains("__um::Managed<[f64]") && embedded(&d).contains(".f64"));
    assert!(f.contains("__um::Managed<[f32]") && !embedded(&f).contains(".f64"));
}

// ------------------------------------------------------------------------------------------
// nvcc runs each tool of its pipeline through a shell, every argument in double quotes: a `$(..)`
// or a backquote in any argument um-build hands it (a flag, a path under the output folder, the
// temporary folder nvcc reads from `TMPDIR`) would run a command of its own in the middle of the
// compile, which can rewrite the check wrapper after um-build wrote it and before the compiler
// reads it.

/// A flag whose value holds a shell command (`-D` is not refused) runs nothing, and the build
/// embeds b's float kernel behind its float launcher. The command here drops the wrapper's
/// `static_assert`s and makes it include the earlier double kernel instead of b's file: the
/// mark stays, so only refusing such a flag (or running nvcc's tools without a shell) holds.
#[test]
fn a_flag_runs_no_command_through_nvccs_shell() {
    let root = fresh();
    let out = root.join("out");
    let wrapper = out.join("um-check/k.cu");
    let ran = root.join("ran");
    let rewrite = format!(
        "touch {}; sed -i -e '/^static_assert(/d' -e 's|/b/k.cu|/a/k.cu|' {}",
        ran.display(),
        wrapper.display()
    );
    let mut failures = Vec::new();
    for flags in [
        vec![format!("-DUM_SHELL=$({rewrite})")],
        vec![format!("-DUM_SHELL=`{rewrite}`")],
        vec!["-I".to_owned(), format!("{}/$({rewrite})", root.display())],
    ] {
        let _ = std::fs::remove_file(&ran);
        let mut k = um_build::Kernels::new(root.join("b")).out_dir(&out);
        for f in &flags {
            k = k.flag(f);
        }
        let built = k.build();
        if ran.exists() {
            failures.push(format!("{flags:?}: the flag's command ran"));
        }
        if let Ok(built) = built {
            let code = std::fs::read_to_string(&built.generated).unwrap();
            if double_kernel_behind_a_float_launcher(&code) {
                failures.push(format!(
                    "{flags:?}: a double kernel behind a float launcher"
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The child's entry point: does nothing unless the parent set `UM_SHELL_OUT`, run in a
/// `fresh()` tree with the environment of a row. Builds `b/` of
/// the current folder (a `fresh()` tree) into `UM_SHELL_OUT` and says what the launcher embeds.
#[test]
fn tree_child() {
    let Some(out) = std::env::var_os("UM_SHELL_OUT").map(PathBuf::from) else {
        return;
    };
    match um_build::Kernels::new("b").out_dir(out).build() {
        Ok(built) => {
            let code = std::fs::read_to_string(&built.generated).unwrap();
            println!(
                "CASE built: double kernel behind a float launcher {}",
                double_kernel_behind_a_float_launcher(&code)
            );
        }
        Err(e) => println!("CASE refused: {}", e.to_string().replace('\n', " | ")),
    }
}

/// An output folder (`Kernels::out_dir`, or cargo's `OUT_DIR`) or a temporary folder (`TMPDIR`,
/// which nvcc puts on its tools' command lines) whose name holds `$(..)` runs no command. Each
/// runs in a child process in the `fresh()` tree (the command here, `touch ran`, runs there).
#[test]
fn a_folder_name_runs_no_command_through_nvccs_shell() {
    let root = fresh();
    let ran = root.join("ran");
    let tmp = root.join("t$(touch ran)");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut failures = Vec::new();
    for (case, out, tmpdir) in [
        ("out_dir", root.join("o$(touch ran)"), None),
        ("TMPDIR", root.join("out"), Some(&tmp)),
    ] {
        let _ = std::fs::remove_file(&ran);
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "tree_child", "--nocapture", "--test-threads=1"])
            .current_dir(&root)
            .env("CARGO_MANIFEST_DIR", &root)
            .env("UM_SHELL_OUT", &out);
        if let Some(t) = tmpdir {
            cmd.env("TMPDIR", t);
        }
        let output = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let said = stdout.lines().find_map(|l| l.strip_prefix("CASE "));
        if ran.exists() {
            failures.push(format!("{case}: the folder name's command ran ({said:?})"));
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The host preprocessor's own include path from the environment (`CPATH`, `CPLUS_INCLUDE_PATH`,
/// `C_INCLUDE_PATH`) can put a header ahead of the system's: here a `stdlib.h` (which nvcc's
/// `cuda_runtime.h` includes ahead of the wrapper) that defines `float` as `double`. Each build
/// is refused, or embeds b's float kernel behind its float launcher: the wrapper's checks see the
/// type the kernel was compiled with, whatever header made it so.
#[test]
fn headers_put_first_by_the_preprocessors_environment_cannot_retype_a_kernel() {
    let root = fresh();
    let inc = root.join("inc");
    std::fs::create_dir_all(&inc).unwrap();
    for h in ["stdlib.h", "cstdlib", "stddef.h"] {
        std::fs::write(
            inc.join(h),
            format!("#include_next <{h}>\n#ifndef UM_RETYPE\n#define UM_RETYPE\n#define float double\n#endif\n"),
        )
        .unwrap();
    }
    let mut failures = Vec::new();
    for var in ["CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"] {
        let out = root.join("out");
        let _ = std::fs::remove_dir_all(&out);
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tree_child", "--nocapture", "--test-threads=1"])
            .current_dir(&root)
            .env("CARGO_MANIFEST_DIR", &root)
            .env("UM_SHELL_OUT", &out)
            .env(var, &inc)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let said = stdout.lines().find_map(|l| l.strip_prefix("CASE "));
        if said.is_none_or(|s| s.contains("behind a float launcher true")) {
            failures.push(format!("{var}: {said:?}"));
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
