//! The project's tooling, run as `cargo xtask COMMAND` here and as `um-xtask COMMAND` in the
//! GPU bundle (a machine with no Rust): everything the GPU machine runs is built here.
//!
//! ```text
//! xtask run [run.sh options]    the GPU test runner (the bundle's run.sh execs it; run.rs)
//! xtask nccl-call OUT [BUDGET_S] the NCCL GPU runs in one device call, from the repository
//!                               root (scripts/nccl-call.sh execs it; nccl_call.rs)
//! xtask verdict-call LIMIT_S [run.sh options]
//!                               one call of a verdict split across device calls, from the
//!                               repository root (scripts/verdict-call.sh execs it)
//! xtask readme-check            README's Quick start done as a newcomer does it, on the
//!                               packages of `cargo package --workspace` (.ci/run; readme_check.rs)
//! ```

mod nccl_call;
mod readme_check;
mod run;
mod verdict_call;

fn main() {
    let mut args = std::env::args().skip(1);
    let code = match args.next().as_deref() {
        Some("run") => run::main(args.collect()),
        Some("nccl-call") => nccl_call::main(args.collect()),
        Some("verdict-call") => verdict_call::main(args.collect()),
        Some("readme-check") => readme_check::main(args.collect()),
        _ => {
            eprintln!(
                "usage: xtask run [--repeat N | --sanitize [TOOL ...] | --all OUT ...] | xtask nccl-call OUT [BUDGET_S] | xtask verdict-call LIMIT_S [...] | xtask readme-check"
            );
            2
        }
    };
    std::process::exit(code);
}
