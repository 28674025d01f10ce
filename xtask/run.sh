#!/usr/bin/env bash
# The bundle's GPU test runner: `um-xtask run`, built from xtask/src/run.rs (which says what it
# runs: run.sh [--repeat N] | --sanitize [TOOL ...] | --emulate-no-concurrent-access ... |
# --all OUT [--parts P1,P2,..] [--resume VERDICT]). The GPU machine has no Rust:
# scripts/gpu-bundle.sh builds it here and copies it beside this file.
exec "$(dirname "${BASH_SOURCE[0]}")/um-xtask" run "$@"
