#!/usr/bin/env bash
# Builds every test binary and every example in release, strips them, and copies them with
# the GPU runner (um-xtask, built from xtask/; run.sh execs it) into one folder (default target/gpu-bundle, git-ignored) that runs on a machine with
# the NVIDIA driver and nothing else: no Rust, no CUDA toolkit, no network.
#
#   bash scripts/gpu-bundle.sh [DIR]
#   DIR/run.sh                      # on the GPU machine; last line: "N passed, N failed"
#   DIR/run.sh --all OUT            # the whole verdict -> OUT/verdict.txt, OUT/docs/reliability.md
#   DIR/bench.sh OUT                # on the GPU machine: benchmarks -> OUT/performance.md
#   bash DIR/racecheck/study.sh OUT # on the GPU machine: the racecheck study -> OUT/summary.txt
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
out=${1:-$root/target/gpu-bundle}
bash scripts/setup.sh
rm -rf "$out"
mkdir -p "$out/tests" "$out/examples" "$out/bench"

# Executables from cargo's JSON messages. The compile-fail suite (`ui`) and the build of a user's
# crate (`out_of_workspace`) need cargo and rustc, which a GPU machine lacks; they run on CI, as
# does the comparison of um-kernels' shipped PTX with nvcc 13.0's (`shipped_ptx`), the
# differential test of um-build against nvcc (`differential`), the prebuilt-PTX build cases
# (`prebuilt`), um-build's diagnostics (`diagnostics`) and the layer check of um-core's sources
# (`layers`), um-build's freshness, dynamic-shared-memory and block-shape tests (`fresh_artefacts`, `dynamic_shared`, `block_shape`)
# and its reading of declarations, with and without nvcc (`declarations`, `declarations_nvcc`): none of them uses a GPU. Nor do um-nccl's bootstrap tests over loopback TCP
# (`bootstrap_*`) and its time-limit tests (`time_limits`), nor the tooling's
# own tests (xtask's: the runner and nccl-call with stand-ins; left out by --exclude xtask), nor the check of docs/rules.md's
# citations against the sources (`rule_index`), nor the test kernels' crate, which has no
# tests (`um_test_kernels`), nor the check of um-cublas's and um-nccl's foreign-call
# layers (`ffi_layers`): CI runs them, and leaving them out keeps the bundle within the 64 MiB
# that a device call carries.
# $1: "example" for examples, "bench" for benchmarks, anything else for test binaries.
executables() {
  python3 -c '
import json, sys
want = sys.argv[1]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        t = m["target"]
        kind = "example" if "example" in t["kind"] else "bench" if "bench" in t["kind"] else "test"
        if t["name"] not in ("ui", "out_of_workspace", "declarations", "declarations_nvcc", "shipped_ptx", "differential", "layers", "prebuilt", "diagnostics", "fresh_artefacts", "dynamic_shared", "block_shape", "time_limits", "rule_index", "um_test_kernels", "ffi_layers") and not t["name"].startswith("bootstrap_") and (kind == want or (want not in ("example", "bench") and kind == "test")):
            print(t["name"] + "\t" + m["executable"])' "$1"
}
cargo test --workspace --exclude xtask --release --no-run --message-format=json-render-diagnostics 2>/dev/null |
  executables test | while IFS=$'\t' read -r name exe; do cp "$exe" "$out/tests/$name"; done
cargo build --workspace --release --examples --message-format=json-render-diagnostics 2>/dev/null |
  executables example | while IFS=$'\t' read -r name exe; do cp "$exe" "$out/examples/$name"; done
cargo build --release -p own-kernels --message-format=json-render-diagnostics 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bin" in m["target"]["kind"]:
        print(m["executable"])' | while read -r exe; do cp "$exe" "$out/examples/own_kernels"; done
cargo build --release --benches --message-format=json-render-diagnostics 2>/dev/null |
  executables bench | while IFS=$'\t' read -r name exe; do cp "$exe" "$out/bench/$name"; done
# The NCCL probe again with um-nccl's phase timing (`--poll ROUNDS [--blocking]` then also
# prints where each phase of um's launch and of the raw step spends its time).
cargo build --release --bench nccl_probe --features phase-timing --message-format=json-render-diagnostics 2>/dev/null |
  executables bench | while IFS=$'\t' read -r name exe; do cp "$exe" "$out/bench/nccl_probe_phases"; done
# Symbols stripped too (the bundle travels within 64 MiB; every program's symbols made it
# 70 MB), except for the programs named in UM_BUNDLE_SYMBOLS, which keep their function names
# for the stacks of scripts/stall-stacks.sh (debug info is stripped from them all the same). By
# default those whose host threads wait for the GPU in many ways at once: a hang in them is
# the likeliest, and run.sh takes the stacks of any program that hangs.
UM_BUNDLE_SYMBOLS=${UM_BUNDLE_SYMBOLS-"tests/gpu examples/async_requests examples/per_thread_streams examples/multithreaded_run_task"}
for exe in "$out"/tests/* "$out"/examples/* "$out"/bench/*; do
  case " ${UM_BUNDLE_SYMBOLS:-} " in
    *" ${exe#"$out"/} "*) strip --strip-debug "$exe" ;;
    *) strip "$exe" ;;
  esac
done
cp bench/baseline.cpp bench/cublas_baseline.cpp bench/nccl_baseline.cpp bench/graph_baseline.cpp bench/cg_baseline.cpp bench/memcheck_cross_device.cu bench/racecheck_cusparse.cu bench/notes.md "$out/bench/"
# The page of the last full run, for `bench.sh OUT --only ... --base bench/performance.md`.
cp docs/performance.md "$out/bench/performance.md"
cp scripts/gpu-bench.sh "$out/bench.sh"
chmod +x "$out/bench.sh"
# The GPU runner: `um-xtask run` (xtask/src/run.rs), and run.sh, which execs it, so that every
# call line (`bash target/gpu-bundle/run.sh --all OUT ...`) stays as it was.
cargo build --release -p xtask 2>/dev/null
cp "${CARGO_TARGET_DIR:-target}/release/xtask" "$out/um-xtask"
strip "$out/um-xtask"
cp xtask/run.sh "$out/run.sh"
cp scripts/stall-stacks.sh "$out/stall-stacks.sh" # run.sh takes the stacks of a program that hangs
chmod +x "$out/run.sh" "$out/um-xtask"
# The programs that read the device's free memory (`mem_info`): under a sanitizer, where run.sh
# runs several programs on one GPU at a time (UM_SANITIZE_PER_GPU), each of these has its GPU to
# itself, so that no other process's allocations move what it reads. Found in the sources, so
# that a new such test is never missed.
{
  echo "# written by scripts/gpu-bundle.sh: programs that read the device's free memory"
  # A helper every test module shares (tests/common): then every module reads it.
  shared_tests=$(grep -rlq "mem_info" tests/common && echo yes || true)
  for f in tests/gpu/gpu_*.rs tests/gpu_devices/gpu_*.rs; do
    if [ -n "$shared_tests" ] || grep -q "mem_info" "$f"; then echo "tests/$(basename "$f" .rs)"; fi
  done
  # Code every example shares, or the user's kernel crate: then every example reads it.
  shared_examples=$(grep -rlq "mem_info" examples/common examples/own-kernels 2>/dev/null && echo yes || true)
  for f in examples/*.rs; do
    if [ -n "$shared_examples" ] || grep -q "mem_info" "$f"; then echo "examples/$(basename "$f" .rs)"; fi
  done
  if [ -n "$shared_examples" ]; then echo "examples/own_kernels"; fi
} >"$out/gpu-exclusive.txt"
# The programs that use a second device where one exists (they ask for the device count or for
# device 1): under a sanitizer, on a machine of two or more GPUs, run.sh runs each with every
# GPU, so that its tests of a second device are not skipped there. Found in the sources too.
{
  echo "# written by scripts/gpu-bundle.sh: programs that use a second device where there is one"
  for f in tests/gpu/gpu_*.rs tests/gpu_devices/gpu_*.rs examples/*.rs; do
    if grep -qE 'device_count\(|Context::new\(1\)' "$f"; then
      case $f in
        examples/*) echo "examples/$(basename "$f" .rs)" ;;
        *) echo "tests/$(basename "$f" .rs)" ;;
      esac
    fi
  done
} >"$out/gpu-every.txt"
# run.sh --all renders docs/reliability.md from its verdict and these notes, naming this commit.
cp scripts/reliability-doc.py "$out/reliability_doc.py"
cp bench/reliability-notes.md "$out/reliability-notes.md"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit+uncommitted"
echo "$commit" >"$out/COMMIT"
# The racecheck study: a C++ reproducer without um, built by nvcc on the GPU machine,
# um's own streams.ptx for it (the newest release build's; the study rebuilds it from the
# source where it is missing), and the script: `bash DIR/racecheck/study.sh OUT`.
mkdir -p "$out/racecheck"
cp bench/racecheck_repro.cu kernels-ptx/streams.cu crates/um-build/include/um.cuh "$out/racecheck/"
cp scripts/racecheck-study.sh "$out/racecheck/study.sh"
chmod +x "$out/racecheck/study.sh"
ptx=$(ls -t "${CARGO_TARGET_DIR:-target}"/release/build/um-kernels-*/out/um-ptx/streams.ptx 2>/dev/null | head -n 1 || true)
[ -n "$ptx" ] && cp "$ptx" "$out/racecheck/streams.ptx"
# The pipeline probe and the dot-result probe (bench/dot_result_probe.cu says how to build it):
# CUDA C++ without um, built by nvcc on the GPU machine:
# `bash DIR/pipeline-probe/probe.sh OUT`.
mkdir -p "$out/pipeline-probe"
cp bench/pipeline_probe.cu bench/dot_result_probe.cu "$out/pipeline-probe/"
cp scripts/pipeline-probe.sh "$out/pipeline-probe/probe.sh"
chmod +x "$out/pipeline-probe/probe.sh"
# The cuda-samples source that examples/unified_memory_streams.rs ports, for a side-by-side run
# on the GPU machine: fetched data (.external/, git-ignored), carried only where present, never
# built by any script here.
if [ -f .external/UnifiedMemoryStreams.cu ]; then
  mkdir -p "$out/external"
  cp -r .external/. "$out/external/"
  cp scripts/ums-compare.sh "$out/external/"
fi
size=$(du -sm "$out" | cut -f1)
echo "bundle: $out ($(ls "$out/tests" | wc -l) test binaries, $(ls "$out/examples" | wc -l) examples, ${size} MiB)"
[ "$size" -lt 60 ] || { echo "bundle: larger than 60 MiB" >&2; exit 1; }
