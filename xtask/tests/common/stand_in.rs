//! Stand-ins for the GPU machine's tools, for the tests that run its scripts without a GPU
//! (`runner.rs`, `nccl_call.rs`). Included by path: it needs nothing of um.
#![allow(dead_code, unreachable_pub, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch folder under the system's temporary folder, named for the test and the process,
/// empty when made and removed when dropped.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        Scratch { dir }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Writes `text` to `path` and makes it executable.
pub fn executable(path: &Path, text: &str) {
    fs::write(path, text).expect("write");
    let status = Command::new("chmod")
        .arg("+x")
        .arg(path)
        .status()
        .expect("chmod");
    assert!(status.success());
}

/// An `nvidia-smi` that lists `gpus` GPUs (`-L`) and answers every query with one line.
pub fn nvidia_smi(gpus: usize) -> String {
    let lines: String = (0..gpus)
        .map(|i| format!("echo 'GPU {i}: Stand-in (UUID: GPU-{i})'; "))
        .collect();
    format!("#!/usr/bin/env bash\ncase \"$*\" in -L) {lines};; *) echo 'Stand-in, 0.0';; esac\n")
}

/// `PATH` with `bin` first.
pub fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Runs `cmd` to its end: (exit status, or -1 for a signal; stdout then stderr), the output
/// also printed under `label`, for the reader of a failing test.
pub fn run(cmd: &mut Command, label: &str) -> (i32, String) {
    let o = cmd.output().expect("bash runs the script");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    println!("--- {label} ---\n{text}--- end ---");
    (o.status.code().unwrap_or(-1), text)
}

/// Puts the tool under test at `to` without writing a copy where it can: a hard link (a file
/// this process wrote could still be open for writing in a child forked meanwhile by another
/// test's thread, and executing it would then fail with "Text file busy"). Where a hard link
/// cannot be made (another file system), a copy.
pub fn place_tool(from: &str, to: &Path) {
    if fs::hard_link(from, to).is_err() {
        fs::copy(from, to).expect("the tool into the bundle");
    }
}
