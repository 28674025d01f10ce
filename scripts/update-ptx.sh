#!/usr/bin/env bash
# Rebuilds the PTX that um-kernels ships (crates/um-kernels/ptx/, used by its build when no nvcc
# is found: docs.rs, users without a CUDA toolkit) from kernels-ptx/*.cu, with nvcc 13.0.x
# through um-build's checked compile. Run it after changing a kernel, and commit ptx/;
# `cargo test -p um-kernels --test shipped_ptx` fails until then.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
UM_BLESS_PTX=1 cargo test -p um-kernels --test shipped_ptx -- --nocapture
git status --short crates/um-kernels/ptx
