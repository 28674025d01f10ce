//! `cargo xtask readme-check`, from the repository root, after `cargo package --workspace`
//! (`scripts/package-check.sh`; `.ci/run` runs both): README's Quick start, done as a newcomer
//! does it, with nothing but what README says to install.
//!
//! 1. README's "Quick start" section is read: the crate's name (`cargo new NAME`), every fenced
//!    block whose first line names a file (`# Cargo.toml`, `// build.rs`, ...), and the `sh`
//!    blocks, run in order. A `sh` block whose first line begins `# Without the NVIDIA driver`
//!    (the driver's library, installed with sudo) is only checked to parse (`bash -n`). Any
//!    other block fails the check: every step README gives is run.
//! 2. A fresh folder outside the repository stands for the newcomer's machine: `HOME` is a
//!    folder of its own (cargo and rustup keep theirs), and nothing leads to this repository's
//!    toolchain (`NVCC`, `CUDA_PATH`, `CUDA_LIBRARY_PATH`, `UM_LOCAL_NVCC`, ... unset; `PATH`
//!    without a folder holding an nvcc). There `cargo new NAME`, then README's files, with
//!    README's dependency lines (`um-cuda = "0.1"`, `um-build = "0.1"`) pointed by
//!    `[patch.crates-io]` at the packages of `target/package/`, as crates.io would serve them
//!    (the files `cargo package` keeps, not the workspace's). README's own patch, which takes
//!    them from a clone in `../um` until they are published, must name this repository's
//!    folders; the packages stand in for it. No `Cargo.lock` is copied: the dependencies
//!    resolve as a newcomer's do.
//! 3. The first `cargo build` must fail the way a newcomer's does before installing anything,
//!    with um-build's "nvcc not found" saying README's pip command (skipped where
//!    `/usr/local/cuda/bin/nvcc` exists). README's pip command must name the pins of
//!    `scripts/setup.sh`.
//! 4. README's commands run (`bash -eo pipefail`; the pip install downloads from PyPI into the
//!    fresh `HOME`), then `cargo run` must build and print `[12.0, 24.0, 36.0]`, or, without a
//!    GPU, stop with `NoDevice`.
//!
//! The build goes to `target/readme-check/` (dependencies compile once across runs). Prints the
//! time of each step; the last line is `readme-check: ok (N s)` or what failed. The fresh
//! folder is removed unless the check fails.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// What README's Quick start holds.
#[derive(Debug, PartialEq)]
struct QuickStart {
    /// `cargo new NAME`.
    crate_name: String,
    /// (path in the crate, text), in README's order.
    files: Vec<(String, String)>,
    /// The `sh` blocks to run, in order.
    commands: Vec<String>,
    /// The `sh` blocks only shown (they install with sudo): checked to parse.
    shown: Vec<String>,
}

/// The first line of a `sh` block that is shown, not run.
const SHOWN_ONLY: &str = "# Without the NVIDIA driver";

/// README's "Quick start" section, from its heading to the next `## `.
fn section(readme: &str) -> Result<&str, String> {
    let start = readme
        .find("\n## Quick start\n")
        .ok_or("README has no `## Quick start` section")?
        + 1;
    let rest = &readme[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    Ok(&rest[..end])
}

/// The file a block's first line names (`// build.rs`, `# Cargo.toml`), if it names one.
fn named_file(first: &str) -> Option<String> {
    let rest = first
        .strip_prefix("// ")
        .or_else(|| first.strip_prefix("# "))?;
    let name = rest.split_whitespace().next()?.trim_end_matches([':', ',']);
    name.contains('.').then(|| name.to_owned())
}

fn quick_start(readme: &str) -> Result<QuickStart, String> {
    let text = section(readme)?;
    let crate_name = text
        .split("`cargo new ")
        .nth(1)
        .and_then(|rest| rest.split([' ', '`']).next())
        .filter(|n| !n.is_empty())
        .ok_or("Quick start names no `cargo new NAME`")?
        .to_owned();
    let mut quick = QuickStart {
        crate_name,
        files: Vec::new(),
        commands: Vec::new(),
        shown: Vec::new(),
    };
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let first = body.first().copied().unwrap_or_default();
        let block = body.join("\n") + "\n";
        if info.trim() == "sh" {
            if first.starts_with(SHOWN_ONLY) {
                quick.shown.push(block);
            } else {
                quick.commands.push(block);
            }
        } else if let Some(name) = named_file(first) {
            quick.files.push((name, block));
        } else {
            return Err(format!(
                "a block of Quick start that is neither a file (a first line `// NAME` or \
                 `# NAME`) nor a `sh` block, so nothing would run it: ```{info}\n{first}"
            ));
        }
    }
    Ok(quick)
}

/// `text` with each line that ends in `\` joined to the next (the shell's continuation).
fn joined(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        match line.strip_suffix('\\') {
            Some(head) => {
                out.push_str(head.trim_end());
                out.push(' ');
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    // The continued lines' indentation.
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// README's command that installs nvcc from PyPI, on one line.
fn pip_command(quick: &QuickStart) -> Option<String> {
    quick.commands.iter().find_map(|block| {
        joined(block)
            .lines()
            .find(|l| l.starts_with("python3 -m pip install"))
            .map(str::to_owned)
    })
}

/// The pins of `scripts/setup.sh` (`NVCC_PINS=(...)`).
fn setup_pins(setup: &str) -> Vec<String> {
    setup
        .lines()
        .find_map(|l| l.strip_prefix("NVCC_PINS=("))
        .and_then(|l| l.split(')').next())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// README's `[patch.crates-io]` block, which takes the packages from a clone of this
/// repository in `../um` until they are on crates.io: each `NAME = { path = "../um/..." }` must
/// name that package's folder in this repository. `Ok(names)`, or what is wrong.
fn clone_patch(block: &str, root: &Path) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for line in block.lines().filter(|l| l.contains("path = ")) {
        let name = line.split('=').next().unwrap_or_default().trim();
        let path = line.split('"').nth(1).unwrap_or_default();
        let rel = path
            .strip_prefix("../um")
            .ok_or_else(|| format!("README's patch does not take {name} from ../um: {line}"))?;
        let manifest = root.join(rel.trim_start_matches('/')).join("Cargo.toml");
        let text = fs::read_to_string(&manifest).unwrap_or_default();
        if !text.contains(&format!("\nname = \"{name}\"\n")) {
            return Err(format!(
                "README's patch takes {name} from {path}, which in this repository is not {name}: {line}"
            ));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// `[workspace.package] version` of the workspace's Cargo.toml.
fn workspace_version(manifest: &str) -> Option<String> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.split('"').next())
        .map(str::to_owned)
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The newcomer's machine: a `HOME` of its own, and nothing of this repository's toolchain.
struct Machine {
    home: PathBuf,
    cargo_home: PathBuf,
    rustup_home: Option<PathBuf>,
    path: std::ffi::OsString,
    target: PathBuf,
}

/// What leads um-build, cust_raw or cargo to a toolchain or a build other than the newcomer's.
const CLEARED: &[&str] = &[
    "NVCC",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
    "CUDA_LIBRARY_PATH",
    "UM_LOCAL_NVCC",
    "UM_CUDA_ARCH",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_TARGET_DIR",
    "DOCS_RS",
];

impl Machine {
    fn command(&self, program: impl AsRef<std::ffi::OsStr>, dir: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(dir)
            .env("HOME", &self.home)
            .env("CARGO_HOME", &self.cargo_home)
            .env("PATH", &self.path)
            .env("CARGO_TARGET_DIR", &self.target);
        if let Some(r) = &self.rustup_home {
            cmd.env("RUSTUP_HOME", r);
        }
        for var in CLEARED {
            cmd.env_remove(var);
        }
        cmd
    }
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    cmd.output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))
}

/// The check; `Err` says what failed. `tmp` is the fresh folder.
fn check(root: &Path, tmp: &Path) -> Result<(), String> {
    let t0 = Instant::now();
    let step = |what: &str| println!("readme-check: {what} ({:.0} s)", t0.elapsed().as_secs_f64());
    let read = |rel: &str| {
        fs::read_to_string(root.join(rel)).map_err(|e| format!("cannot read {rel}: {e}"))
    };
    let quick = quick_start(&read("README.md")?)?;
    let pip = pip_command(&quick).ok_or("Quick start gives no `python3 -m pip install` command")?;
    let pins = setup_pins(&read("scripts/setup.sh")?);
    if pins.is_empty() || pins.iter().any(|p| !pip.split(' ').any(|w| w == p)) {
        return Err(format!(
            "README's pip command does not name the pins of scripts/setup.sh ({}): {pip}",
            pins.join(" ")
        ));
    }
    for block in &quick.shown {
        let out = run(Command::new("bash").args(["-n", "-c", block]))?;
        if !out.status.success() {
            return Err(format!(
                "a shown block does not parse:\n{block}{}",
                said(&out)
            ));
        }
    }

    // The packages, as crates.io would serve them.
    let version = workspace_version(&read("Cargo.toml")?).ok_or("no workspace version")?;
    let packages = tmp.join("packages");
    fs::create_dir_all(&packages).map_err(|e| e.to_string())?;
    let mut patch = String::from(
        "\n# The packages of `cargo package`, as crates.io would serve them.\n[patch.crates-io]\n",
    );
    let crates = fs::read_dir(root.join("target/package")).map_err(|e| {
        format!("no target/package ({e}): run `cargo package --workspace` first (scripts/package-check.sh does)")
    })?;
    let mut names = Vec::new();
    for entry in crates.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(name) = file.strip_suffix(&format!("-{version}.crate")) else {
            continue;
        };
        let out = run(Command::new("tar")
            .arg("xzf")
            .arg(entry.path())
            .arg("-C")
            .arg(&packages))?;
        if !out.status.success() {
            return Err(format!("tar xzf {file}: {}", said(&out)));
        }
        let dir = packages.join(format!("{name}-{version}"));
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).map_err(|e| e.to_string())?;
        if manifest.lines().any(|l| l.trim() == "publish = false") {
            continue;
        }
        patch.push_str(&format!(
            "{name} = {{ path = {:?} }}\n",
            dir.display().to_string()
        ));
        names.push(name.to_owned());
    }
    for needed in ["um-cuda", "um-build"] {
        if !names.iter().any(|n| n == needed) {
            return Err(format!(
                "no target/package/{needed}-{version}.crate: run `cargo package --workspace` first"
            ));
        }
    }
    names.sort();
    step(&format!("packages unpacked: {}", names.join(" ")));

    // The newcomer's machine.
    let home = tmp.join("home");
    fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    let real_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let machine = Machine {
        home: home.clone(),
        cargo_home: std::env::var_os("CARGO_HOME")
            .map_or_else(|| real_home.join(".cargo"), PathBuf::from),
        rustup_home: std::env::var_os("RUSTUP_HOME")
            .map(PathBuf::from)
            .or_else(|| Some(real_home.join(".rustup")).filter(|r| r.is_dir())),
        path: std::env::join_paths(
            std::env::split_paths(&path).filter(|d| !d.join("nvcc").exists()),
        )
        .map_err(|e| e.to_string())?,
        target: root.join("target/readme-check"),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    // `cargo new NAME`, then README's files.
    let out = run(machine
        .command(&cargo, &home)
        .args(["new", &quick.crate_name]))?;
    if !out.status.success() {
        return Err(format!("cargo new {}: {}", quick.crate_name, said(&out)));
    }
    let dir = home.join(&quick.crate_name);
    for (name, text) in &quick.files {
        let file = dir.join(name);
        let text = if name == "Cargo.toml" && text.contains("[patch.crates-io]") {
            // The clone's paths: checked, and replaced by the packages (`patch`), which hold
            // what crates.io would serve rather than the workspace.
            let patched = clone_patch(text, root)?;
            if patched != ["um-cuda", "um-build"] {
                return Err(format!(
                    "README's patch takes {patched:?}, not um-cuda and um-build"
                ));
            }
            continue;
        } else if name == "Cargo.toml" {
            // `cargo new` ends its Cargo.toml with an empty `[dependencies]`: README's block
            // stands for it.
            let generated = fs::read_to_string(&file).map_err(|e| e.to_string())?;
            let package = generated
                .strip_suffix("[dependencies]\n")
                .ok_or_else(|| format!("`cargo new` wrote another Cargo.toml:\n{generated}"))?;
            format!("{package}{text}{patch}")
        } else {
            text.clone()
        };
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    }
    step(&format!(
        "cargo new {} and README's files: {}",
        quick.crate_name,
        quick
            .files
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));

    // Before README's commands: um-build says the one command to run.
    if Path::new("/usr/local/cuda/bin/nvcc").exists() {
        println!(
            "readme-check: NOTE: /usr/local/cuda/bin/nvcc exists and um-build finds it there: the build without nvcc is not tried"
        );
    } else {
        let out = run(machine
            .command(&cargo, &dir)
            .args(["build", "--keep-going"]))?;
        let text = said(&out);
        if out.status.success() || !text.contains("nvcc not found") || !text.contains(&pip) {
            return Err(format!(
                "before README's commands, the build should fail with um-build's \"nvcc not found\" saying README's command\n  {pip}\n{text}"
            ));
        }
        step("before README's commands: the build fails, um-build saying README's pip command");
    }

    // README's commands, then `cargo run`.
    for block in &quick.commands {
        let out = run(machine
            .command("bash", &dir)
            .args(["-eo", "pipefail", "-c", block]))?;
        if !out.status.success() {
            return Err(format!("README's commands failed:\n{block}{}", said(&out)));
        }
    }
    step(&format!("README's {} sh blocks ran", quick.commands.len()));
    let out = run(machine.command(&cargo, &dir).arg("run"))?;
    let text = said(&out);
    let ran = if out.status.success() {
        text.contains("[12.0, 24.0, 36.0]")
            .then_some("it ran on the GPU: [12.0, 24.0, 36.0]")
    } else {
        (text.contains("Finished") && text.contains("NoDevice"))
            .then_some("it built, and stops at the GPU: no device here (Error::NoDevice)")
    };
    match ran {
        Some(what) => step(&format!("cargo run: {what}")),
        None => return Err(format!("`cargo run` of README's Quick start:\n{text}")),
    }
    println!("readme-check: ok ({:.0} s)", t0.elapsed().as_secs_f64());
    Ok(())
}

/// `readme-check`, from anywhere in the repository; the exit status.
pub(crate) fn main(args: Vec<String>) -> i32 {
    if !args.is_empty() {
        eprintln!(
            "readme-check: usage: cargo xtask readme-check (after cargo package --workspace)"
        );
        return 2;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let tmp = std::env::temp_dir().join(format!("um-readme-check-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    match check(&root, &tmp) {
        Ok(()) => {
            let _ = fs::remove_dir_all(&tmp);
            0
        }
        Err(e) => {
            eprintln!("readme-check: FAILED: {e}");
            eprintln!("readme-check: the fresh folder is kept: {}", tmp.display());
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(rel: &str) -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// README's Quick start is what `cargo xtask readme-check` runs: a crate's four files, the
    /// machine's commands and the crate's, and the driver's install, shown.
    #[test]
    fn the_readme_quick_start_is_files_and_commands() {
        let quick = quick_start(&repo("README.md")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(quick.crate_name, "saxpy");
        let names: Vec<&str> = quick.files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "Cargo.toml",
                "Cargo.toml",
                "build.rs",
                "kernels/saxpy.cu",
                "src/main.rs"
            ]
        );
        // The second is the patch that takes the packages from a clone until they are
        // published, which names this repository's folders.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert_eq!(
            clone_patch(&quick.files[1].1, &root),
            Ok(vec!["um-cuda".to_owned(), "um-build".to_owned()])
        );
        assert!(clone_patch("um-cuda = { path = \"../um/crates/um-core\" }\n", &root).is_err());
        assert_eq!(quick.commands.len(), 2, "{:?}", quick.commands);
        assert!(quick.commands[1].contains(".cargo/config.toml"));
        assert_eq!(quick.shown.len(), 1, "{:?}", quick.shown);
    }

    /// The pip command README gives names every pin of scripts/setup.sh, and installs where
    /// um-build looks.
    #[test]
    fn the_readme_pip_command_names_the_pins_of_setup() {
        let quick = quick_start(&repo("README.md")).unwrap_or_else(|e| panic!("{e}"));
        let pip = pip_command(&quick).unwrap_or_default();
        let pins = setup_pins(&repo("scripts/setup.sh"));
        assert_eq!(pins.len(), 4, "{pins:?}");
        for pin in &pins {
            assert!(pip.split(' ').any(|w| w == pin), "{pin} not in {pip}");
        }
        assert!(
            pip.contains(" --target ~/.local/share/um-cuda/cuda-13.0 "),
            "{pip}"
        );
    }

    /// A block of Quick start that names no file and is no `sh` block is refused: nothing
    /// would run it.
    #[test]
    fn a_block_that_is_neither_a_file_nor_a_command_is_refused() {
        let readme = "# x\n\n## Quick start\n\n`cargo new demo && cd demo`\n\n```toml\n[env]\nA = \"b\"\n```\n\n## Next\n";
        let err = quick_start(readme).expect_err("refused");
        assert!(err.contains("neither a file"), "{err}");
        let ok = readme.replace("```toml\n", "```toml\n# .cargo/config.toml\n");
        let quick = quick_start(&ok).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(quick.files[0].0, ".cargo/config.toml");
        assert_eq!(quick.crate_name, "demo");
    }

    #[test]
    fn continued_lines_are_joined() {
        assert_eq!(joined("a \\\n    b \\\n  c\nd\n"), "a b c\nd".to_owned());
    }
}
