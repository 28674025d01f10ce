#!/usr/bin/env bash
# README's main job: installs the prerequisites, then runs the flagship worked example (seed
# 000: multithreaded run_task, each thread on its own stream). Arguments go to the example.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
cargo build --quiet --release --example multithreaded_run_task
exec target/release/examples/multithreaded_run_task "$@"
