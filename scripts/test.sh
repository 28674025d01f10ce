#!/usr/bin/env bash
# README's test command: installs the prerequisites (scripts/setup.sh), then runs the whole test
# suite. GPU tests are #[ignore = "needs a CUDA device"] and reported as ignored here; they run
# on a GPU machine through the bundle (docs/gpu-testing.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
cargo test --workspace "$@"
