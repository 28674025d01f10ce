//! The project's tooling, run as `cargo xtask COMMAND` here and as `um-xtask COMMAND` in the
//! GPU bundle (a machine with no Rust): everything the GPU machine runs is built here.
//!
//!   xtask run [run.sh options]   the GPU test runner (the bundle's run.sh execs it; see run.rs)

mod run;

fn main() {
    let mut args = std::env::args().skip(1);
    let code = match args.next().as_deref() {
        Some("run") => run::main(args.collect()),
        _ => {
            eprintln!("usage: xtask run [--repeat N | --sanitize [TOOL ...] | --all OUT ...]");
            2
        }
    };
    std::process::exit(code);
}
