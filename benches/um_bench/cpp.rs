//! The CUDA C++ baseline, run as a subprocess; it prints one JSON object per line.

use std::path::PathBuf;
use std::process::Command;

pub(crate) struct Baseline {
    pub(crate) exe: PathBuf,
    pub(crate) ptx_dir: PathBuf,
}

/// The value of `"key":` in a flat JSON object line (numbers and strings only).
pub(crate) fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[at..];
    match rest.strip_prefix('"') {
        // a string runs to its closing quote (commas inside are part of it)
        Some(text) => text.find('"').map(|end| &text[..end]),
        None => Some(&rest[..rest.find([',', '}']).unwrap_or(rest.len())]),
    }
}

pub(crate) fn number(line: &str, key: &str) -> Result<f64, String> {
    field(line, key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no number {key:?} in {line:?}"))
}

impl Baseline {
    /// Runs the baseline with `args` after the mode and PTX folder; its output lines.
    pub(crate) fn run(&self, mode: &str, args: &[String]) -> Result<Vec<String>, String> {
        let out = Command::new(&self.exe)
            .arg(mode)
            .arg(&self.ptx_dir)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} {mode} failed ({}): {}",
                self.exe.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect())
    }
}
