#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle folder that scripts/gpu-bundle.sh made.
#
#   run.sh [--repeat N] [--examples-only]
#                       every test binary with --include-ignored (GPU tests included), then
#                       every example, N times each (default 1). Each test counts as one pass
#                       or failure, each run of an example as one; the last line is
#                       "N passed, N failed". A per-example count is printed when N > 1.
#                       --examples-only skips the test binaries; UM_SKIP_EXAMPLES="a b" skips
#                       those examples (left out of the verdict). Each program runs under
#                       `timeout` (UM_PROGRAM_LIMIT_S, default 300 s): a hang is a failure.
#   run.sh --sanitize [TOOL ...]
#                       every test binary and example under compute-sanitizer, once per tool
#                       (default: memcheck racecheck synccheck initcheck). A program passes when
#                       the tool reports 0 errors. Only programs that use the GPU run; the fault
#                       tests (which fault on purpose) are skipped; memcheck looks for leaks
#                       too (--leak-check full), except in tests whose name holds "leaks_"
#                       (they leak on purpose; a second run checks them for the rest);
#                       Where the machine has two or more GPUs, the programs of one GPU run
#                       side by side, one per GPU (CUDA_VISIBLE_DEVICES; UM_SANITIZE_GPUS=N caps
#                       them), then those that use every GPU (uses_every_gpu) one at a time.
#                       UM_SANITIZE=1 shrinks the
#                       heaviest workloads and the stress test runs 20 iterations. Last line as
#                       above. Under racecheck, per_thread_streams runs its per-thread half only
#                       (UM_ONLY_PER_THREAD=1), and the C++ reproducer bench/racecheck_repro.cu
#                       (no um) runs the legacy half's pattern beside it: racecheck cannot track
#                       launches on the legacy stream from several host threads, with or without
#                       um (docs/reliability.md). A racecheck run whose only report is the
#                       tool's own "Internal Sanitizer Error: Detected a failure to track a
#                       kernel launch" is incomplete, not a verdict: it runs again (at most
#                       UM_RACECHECK_RERUNS=2 more times), the verdict line says so, and the C++
#                       reproducer runs async_requests' pattern beside it, 3 processes at once,
#                       to show the same error without um (tracking_repro_note).
#
#   run.sh --emulate-no-concurrent-access [--repeat N | --sanitize [TOOL ...]]
#                       either of the above with UM_EMULATE_NO_CONCURRENT_ACCESS=1 exported:
#                       every context that Context::new opens behaves as if the device lacked
#                       concurrent managed access (docs/design.md), so every test and example
#                       takes that path.
#
#   run.sh --all OUT [--parts P1,P2,..] [--resume VERDICT]
#                       the whole GPU verdict of this machine, one part after the other: normal
#                       (tests and examples; the two-GPU tests where two GPUs exist), emulated,
#                       memcheck, racecheck, synccheck, initcheck. Writes OUT/verdict.txt (one
#                       line per part and per program) and OUT/docs/reliability.md (the verdict's
#                       tables, then bench/reliability-notes.md), rewritten after every part, so a
#                       run cut short keeps what it did. --parts runs only those parts;
#                       --resume VERDICT keeps the parts an earlier verdict.txt holds (for a run
#                       split across calls; VERDICT may be OUT/verdict.txt itself, to go on in
#                       the same folder; only parts of this bundle's commit are kept unless
#                       UM_RESUME_ANY_COMMIT=1) and runs the others; a sanitizer part that an earlier
#                       call left unfinished goes on from the partial-PART.txt beside VERDICT (one
#                       line per program done; the part's line says how many came from there).
#                       UM_SANITIZE_ONLY="tests/x
#                       examples/y" limits the sanitizer parts to those programs (the part's
#                       line says so). A program still running 120 s before its limit leaves
#                       every thread's stack in OUT/stacks/PART/ (stall-stacks.sh, cuda-gdb)
#                       before `timeout` stops it, and its failure's line names the file.
#
# The two-GPU programs (tests/gpu_two_devices, tests/gpu_nccl, examples/data_parallel) run only
# where nvidia-smi lists two or more GPUs ("skipped" elsewhere), under the sanitizers too
# (data_parallel in its single-process default; gpu_nccl less its killed-rank test, a fault test,
# and its hostile-abort tests).
# Examples that draw timelines write them to
# $UM_SVG_DIR when it is set. NVLink multicast stays off: NCCL_NVLS_ENABLE=0 is exported.
set -u
export NCCL_NVLS_ENABLE=0
cd "$(dirname "${BASH_SOURCE[0]}")"
bundle=$(pwd)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)

# ------------------------------------------------------------------ tests and examples
# Whether a test binary or example needs two GPUs.
two_gpu_only() {
  case "$1" in gpu_devices | gpu_two_devices | gpu_nccl | data_parallel) return 0 ;; esac
  return 1
}

# The programs: every test binary and example, by the path it has in the bundle, except that a
# test binary holding its tests in modules (tests/gpu and tests/gpu_devices: one module per
# feature, named gpu_<feature>) counts as one program per module, named tests/<module>, which
# runs the binary with the filter "<module>::". So every verdict line, skip list and
# UM_SANITIZE_ONLY name is a feature's, and the sanitizers spread the modules over the GPUs.
# Tests such a binary holds outside those modules (at its root, or in a module named
# otherwise) are one program more, named for the binary, that skips the modules: every test
# runs once. A binary that cannot list its tests (it crashes, or outlasts the limit) is one
# program, run whole, so that its failure shows. binary_of[PROGRAM] and filter_of[PROGRAM]
# hold a program's binary and its filter arguments, one a line.
declare -A binary_of=() filter_of=()
test_programs=()
for t in tests/*; do
  [ -f "$t" ] || continue
  # Bounded: a binary that hangs is a failure of its run below, not of this list.
  if ! listed=$(timeout -k 2 10 "./$t" --list --include-ignored 2>/dev/null); then
    echo "=== test binary $(basename "$t"): its tests could not be listed; run whole" >&2
    test_programs+=("$t")
    continue
  fi
  listed=$(printf '%s\n' "$listed" | sed -n 's/: test$//p')
  modules=$(printf '%s\n' "$listed" | sed -n 's/^\(gpu_[a-z0-9_]*\)::.*/\1/p' | sort -u)
  if [ -z "$modules" ]; then
    test_programs+=("$t")
    continue
  fi
  skips=""
  for m in $modules; do
    test_programs+=("tests/$m")
    binary_of["tests/$m"]=$t
    filter_of["tests/$m"]="$m::"
    skips+="--skip"$'\n'"$m::"$'\n'
  done
  if printf '%s\n' "$listed" | grep -qv '^gpu_[a-z0-9_]*::'; then
    test_programs+=("$t")
    filter_of["$t"]=${skips%$'\n'}
  fi
done

# program_command PROGRAM: the command line that runs PROGRAM (its binary, and the module's
# filter or the modules' skips where it has them), one word per line.
program_command() {
  echo "./${binary_of[$1]:-$1}"
  [ -n "${filter_of[$1]:-}" ] && echo "${filter_of[$1]}"
  return 0
}

# Whether PROGRAM is a test program that uses the GPU: a binary or module named gpu or gpu_*.
gpu_test_program() {
  case "$1" in tests/gpu | tests/gpu_*) return 0 ;; esac
  return 1
}

# bounded LIMIT NAME COMMAND [ARG ...]: COMMAND under `timeout -k 10 LIMIT` (a hang is one
# failure, not a lost call). Where UM_STACKS_DIR is set (run.sh --all sets OUT/stacks/PART) and
# the bundle has stall-stacks.sh, a COMMAND still running after UM_STALL_STACKS_S seconds
# (default LIMIT - 120, or LIMIT / 2 for a limit of 240 s or less; the longest clean program
# took 105 s, memcheck of gpu_nccl on 2x H200) first leaves every thread's stack of it and of
# its children in UM_STACKS_DIR/NAME.stacks, with cuda-gdb: a hang in a verdict says where it
# hung (racecheck of async_requests gave only "rc=124 no summary", 2x H200, 2026-11-23).
bounded() {
  local limit=$1 name=$2
  shift 2
  if [ -n "${UM_STACKS_DIR:-}" ] && [ -f ./stall-stacks.sh ]; then
    local after=${UM_STALL_STACKS_S:-$((limit > 240 ? limit - 120 : limit / 2))}
    mkdir -p "$UM_STACKS_DIR"
    rm -f "$UM_STACKS_DIR/$name.stacks" # an earlier call's, in a folder resumed
    UM_STALL_GDB_S=${UM_STALL_GDB_S:-30} bash ./stall-stacks.sh "$after" "$UM_STACKS_DIR/$name.stacks" \
      timeout -k 10 "$limit" "$@"
  else
    timeout -k 10 "$limit" "$@"
  fi
}

# The note a verdict line gets where bounded left stacks for NAME.
stacks_note() {
  [ -n "${UM_STACKS_DIR:-}" ] && [ -s "$UM_STACKS_DIR/$1.stacks" ] &&
    echo " (stacks: stacks/$(basename "$UM_STACKS_DIR")/$1.stacks)"
}

# run_all REPEAT VERDICT_FILE: tests once, examples REPEAT times; one line per program to the
# verdict file (when given); sets $passed and $failed.
run_all() {
  local repeat=$1 verdict=${2:-/dev/null}
  passed=0
  failed=0
  for t in "${test_programs[@]}"; do
    [ -n "${examples_only:-}" ] && break
    local name cmd
    name=$(basename "$t")
    mapfile -t cmd < <(program_command "$t")
    if two_gpu_only "$name" && [ "${gpus:-0}" -lt 2 ]; then
      echo "=== test binary $name: skipped (needs two GPUs, this machine has ${gpus:-0})"
      echo "test $name: skipped (needs two GPUs, this machine has ${gpus:-0})" >>"$verdict"
      continue
    fi
    echo "=== test binary $name"
    local t0=$SECONDS
    local log
    log=$(mktemp)
    # Bounded: a hung binary is one failure, not a lost call (UM_PROGRAM_LIMIT_S, default 300).
    bounded "${UM_PROGRAM_LIMIT_S:-300}" "$name" "${cmd[@]}" --include-ignored 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local counts
    counts=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" | tail -n 1)
    local p=0 f=0
    if [ -n "$counts" ]; then
      p=${counts% *}
      f=${counts#* }
    fi
    # A binary that crashed before its summary counts as one failure.
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
      echo "!!! $name exited with $rc"
      f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    echo "=== test binary $name: $((SECONDS - t0)) s"
    echo "test $name: $p passed, $f failed$(grep -E '^test .* FAILED$' "$log" | sed 's/^test /; /; s/ \.\.\. FAILED$//' | tr -d '\n')$( [ "$f" = 0 ] || stacks_note "$name")" >>"$verdict"
    rm -f "$log"
  done
  for e in examples/*; do
    local name ok=0 bad=0
    name=$(basename "$e")
    case " ${UM_SKIP_EXAMPLES:-} " in *" $name "*)
      echo "=== example $name: skipped (UM_SKIP_EXAMPLES)"
      continue ;;
    esac
    if two_gpu_only "$name" && [ "${gpus:-0}" -lt 2 ]; then
      echo "=== example $name: skipped (needs two GPUs, this machine has ${gpus:-0})"
      echo "example $name: skipped (needs two GPUs, this machine has ${gpus:-0})" >>"$verdict"
      continue
    fi
    for ((i = 1; i <= repeat; i++)); do
      if [ "$repeat" -gt 1 ]; then
        echo "=== example $name (run $i of $repeat)"
      else
        echo "=== example $name"
      fi
      local t0=$SECONDS
      if bounded "${UM_PROGRAM_LIMIT_S:-300}" "$name" "./$e"; then
        ok=$((ok + 1))
      else
        echo "!!! example $name failed (run $i)"
        bad=$((bad + 1))
      fi
      echo "=== example $name: $((SECONDS - t0)) s"
    done
    [ "$repeat" -gt 1 ] && echo "example $name: $ok of $repeat runs passed"
    echo "example $name: $ok of $repeat runs passed$( [ "$bad" = 0 ] || stacks_note "$name")" >>"$verdict"
    passed=$((passed + ok))
    failed=$((failed + bad))
  done
}

# ------------------------------------------------------------------ sanitizers
# The C++ reproducer of racecheck's legacy-stream report (no um), built once per run.
repro_built=""
build_repro() {
  [ -n "$repro_built" ] && return 0
  local dir
  dir=$(mktemp -d)
  local ptx="$bundle/racecheck/streams.ptx"
  if [ ! -f "$ptx" ]; then
    ptx="$dir/streams.ptx"
    "$nvcc" --ptx -arch=compute_75 -I "$bundle/racecheck" -o "$ptx" "$bundle/racecheck/streams.cu" >/dev/null 2>&1 || return 1
  fi
  "$nvcc" -O2 -std=c++17 -arch=compute_75 -o "$dir/racecheck_repro" \
    "$bundle/racecheck/racecheck_repro.cu" -lcuda >/dev/null 2>&1 || return 1
  repro_built="$dir/racecheck_repro --ptx $ptx"
}

# sanitize_one TOOL PROGRAM [ENV...]: runs PROGRAM under TOOL; prints one verdict line; returns
# 0 when the tool reports no error.
sanitize_one() {
  local tool=$1 prog=$2
  shift 2
  local args=() cmd=()
  mapfile -t cmd < <(program_command "$prog")
  case "$prog" in tests/*) args=(--include-ignored --skip fault_ --test-threads=1) ;; esac
  # gpu_nccl's killed-rank test is a fault test by another name: a rank aborts on purpose, and
  # the other's Err is asserted within a time bound that the tools' slowdown does not keep.
  [ "$prog" = tests/gpu_nccl ] && args+=(--skip a_rank_killed_mid_collective)
  # racecheck slows the example's 8 host threads by orders of magnitude: its 10 iterations took
  # 182 s on an H100 (2026-11-28), past the 180 s after which stall-stacks.sh looks at a program's
  # threads, and the program's own exit status was then 11.
  [ "$tool" = racecheck ] && [ "$prog" = examples/multithreaded_run_task ] && args=(--iters 3)
  # Its tests of aborts and of the agreement ledger against a hostile user (a communicator
  # aborted by a waker or beside a group wait, a buffer handed off while its collective runs,
  # ids that NCCL hashes alike, a rank waiting for one of its own thread, a rank that leaves)
  # end in aborted communicators too and bound their waits by times of the same kind: left
  # out the same way (tests/gpu_devices/gpu_nccl.rs lists them).
  [ "$prog" = tests/gpu_nccl ] && args+=(--skip a_comm_aborted_by_a_waker_has_its_kernels_aborted_later
    --skip a_group_wait_that_finds_one_rank_aborted --skip a_buffer_handed_off_while_its_collective_runs
    --skip ids_that_nccl_hashes_alike_are_one_communicator --skip a_nonblocking_communicator_waiting_for_a_rank
    --skip a_rank_that_leaves_does_not_clear_the_pending_calls)
  # Under memcheck, the tests where a kernel of one device reads managed memory that was
  # attached to a stream of the other and handed over: memcheck reports every such read as out
  # of bounds, with or without um (bench/memcheck_cross_device.cu runs beside them and
  # cross_device_note says what it reported: 210,433 errors, 2x H200, 2026-11-22). Not under
  # initcheck, where the reproducer reports nothing.
  if [ "$prog" = tests/gpu_two_devices ] && [ "$tool" = memcheck ]; then
    args+=(--skip is_handed_to_a_stream_of_device_1 --skip stream_of_device_1_receives
      --skip memory_handed_to_device_1 --skip is_handed_to_device_1_and_back)
  fi
  local extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  # Every report printed, so that run.sh can tell NCCL's own kernels from the rest. Under
  # initcheck and racecheck, NCCL's own kernels are not instrumented instead
  # (--kernel-name-exclude kns=nccl, where the tool has it): they report there without um too
  # (nccl_note), and printing every report took gpu_nccl past 300 s under initcheck (2x H200,
  # 2026-11-22). Racecheck looks at one kernel's shared memory, so leaving NCCL's kernels out
  # hides nothing of um's; initcheck then does not see NCCL's writes, and a kernel of um that
  # read a buffer NCCL wrote would be reported (a false alarm that fails the run, not a miss).
  local nccl_prog=""
  case "$prog" in tests/gpu_nccl | examples/data_parallel)
    nccl_prog=1
    if { [ "$tool" = initcheck ] || [ "$tool" = racecheck ]; } && "$cs" --help 2>&1 | grep -q -- '--kernel-name-exclude'; then
      nccl_prog=excluded
      extra+=(--kernel-name-exclude kns=nccl)
    else
      extra+=(--print-limit 1000000)
    fi ;;
  esac
  local log
  log=$(mktemp)
  # CUDA API errors are not reported: every one already surfaces as an Err that fails its
  # test, and the bad-input tests make some on purpose.
  local rc
  if [ "$tool" = memcheck ] && [[ "$prog" == tests/* ]]; then
    # Tests whose name holds "leaks_" leak on purpose (memory a faulted or poisoned stream may
    # still touch, mem::forget): memcheck checks them for everything but leaks, in a second run;
    # every other test also for leaks.
    bounded "${UM_SANITIZE_LIMIT_S:-300}" "$tool-$(basename "$prog")" env "$@" "$cs" --tool memcheck --leak-check full --report-api-errors no \
      --error-exitcode 99 "${cmd[@]}" "${args[@]}" --skip leaks_ >"$log" 2>&1
    rc=$?
    # Only where the program has such tests: a run of none exits with 255 under the tool (every
    # binary without one did, and every binary with one exited 0; 2x H200, 2026-11-22), which
    # hid the first run's status. Named one by one (--exact), so that a module's filter and
    # "leaks_" both hold.
    local leaky=()
    mapfile -t leaky < <(timeout -k 2 60 "${cmd[@]}" "${args[@]}" --list 2>/dev/null | sed -n 's/^\(.*leaks_.*\): test$/\1/p')
    if [ "$rc" = 0 ] && [ "${#leaky[@]}" -gt 0 ]; then
      bounded "${UM_SANITIZE_LIMIT_S:-300}" "$tool-$(basename "$prog")-leaks_" env "$@" "$cs" --tool memcheck --report-api-errors no \
        --error-exitcode 99 "${cmd[0]}" "${args[@]}" --exact "${leaky[@]}" >>"$log" 2>&1
      rc=$?
    fi
  else
    bounded "${UM_SANITIZE_LIMIT_S:-300}" "$tool-$(basename "$prog")" env "$@" "$cs" --tool "$tool" "${extra[@]}" --report-api-errors no \
      --error-exitcode 99 "${cmd[@]}" "${args[@]}" >"$log" 2>&1
    rc=$?
  fi
  local summary
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
  if [ "$nccl_prog" = 1 ] && [ "$rc" = 99 ]; then
    # Reports whose kernel is one of NCCL's (its "at" line or device frame names ncclDev...)
    # against the rest, over every record printed; and the count the tool's summaries give.
    local counts reported
    counts=$(awk '
      function close_rec() { if (open) { total++; if (!nccl) foreign++ } open = 0; nccl = 0 }
      /^========= [^ ]/ {
        close_rec()
        if ($0 ~ /SUMMARY|COMPUTE-SANITIZER|Target application|^========= *$/) next
        open = 1; next
      }
      open && /^=========  +(at |Device Frame:)/ && /nccl/ { nccl = 1 }
      /^=========  +at / { at++; if ($0 !~ /nccl/) at_foreign++ }
      END { close_rec(); print total + 0, foreign + 0, at + 0, at_foreign + 0 }' "$log")
    # The summaries' counts, less any "N errors were not printed" line (a synccheck of
    # gpu_nccl on 2x H200, 2026-11-22, printed a summary line of that form; summed in, it would make the
    # count disagree with the records).
    reported=$(grep -E "ERROR SUMMARY: [0-9]+ error" "$log" | grep -v "not printed" |
      grep -oE "ERROR SUMMARY: [0-9]+ error" | awk '{s += $3} END {print s + 0}')
    local unprinted
    unprinted=$(grep -oE "[0-9]+ errors? were not printed" "$log" | awk '{s += $1} END {print s + 0}')
    # counts: records, records outside NCCL, "at" lines, "at" lines outside NCCL. With several
    # processes writing to one log (gpu_nccl's ranks), a record's first line can be torn (the
    # synccheck of gpu_nccl printed 5,534 whole first lines for 5,536 reports, and 5,536 "at"
    # lines, every one in NCCL; 2x H200, 2026-11-22): then the "at" lines, one per report,
    # are counted instead.
    local records foreign at at_foreign
    read -r records foreign at at_foreign <<<"$counts"
    if [ "$reported" -gt 0 ] && [ "$foreign" = 0 ] && [ "$at_foreign" = 0 ] &&
      { [ "$records" = "$reported" ] || [ "$at" = "$reported" ]; }; then
      echo "ok  $tool $(basename "$prog"): $reported reports, every one inside NCCL's own kernels"
      rm -f "$log"
      return 3
    fi
    # Why not: the records' kinds and kernels, and the counts, for the verdict's reader.
    if [ -n "${UM_SANITIZE_LOGS:-}" ]; then
      mkdir -p "$UM_SANITIZE_LOGS"
      {
        echo "records printed: $records; outside NCCL's kernels: $foreign; \"at\" lines: $at, outside NCCL: $at_foreign; summaries: $reported; not printed, by the tool's own count: $unprinted"
        grep -E "ERROR SUMMARY" "$log" | sort | uniq -c
        echo "-- record kinds"
        grep -E "^========= [A-Z]" "$log" | grep -vE "SUMMARY|COMPUTE-SANITIZER" | sed -E 's/0x[0-9a-f]+/X/g; s/\([0-9,]+\)/(N)/g' | sort | uniq -c | sort -rn | head -n 20
        echo "-- where"
        grep -E "^=========  +at " "$log" | sed -E 's/\+0x[0-9a-f]+//' | sort | uniq -c | sort -rn | head -n 20
      } >"$UM_SANITIZE_LOGS/$tool-$(basename "$prog").classes"
    fi
  fi
  if [ "$tool" = racecheck ] && tracking_failure_only "$log"; then
    echo "??? $tool $(basename "$prog"): rc=$rc $summary: the tool's own \"$tracking_error\", no hazard records: this run is incomplete, not a verdict"
    if [ -n "${UM_SANITIZE_LOGS:-}" ]; then
      mkdir -p "$UM_SANITIZE_LOGS"
      grep -E '^=========|^test |panicked' "$log" | head -n 400 >"$UM_SANITIZE_LOGS/$tool-$(basename "$prog").incomplete.log"
    fi
    rm -f "$log"
    return 5
  fi
  if [ "$rc" = 99 ] || ! grep -qE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" "$log" ||
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | grep -qvE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards"; then
    echo "!!! $tool $(basename "$prog"): rc=$rc ${summary:-no summary}$(stacks_note "$tool-$(basename "$prog")")$(stacks_note "$tool-$(basename "$prog")-leaks_")"
    grep -E "^========= (Invalid|Uninitialized|Race|Barrier|Error|Program hit|Internal|Leaked)" "$log" | sort | uniq -c | head -n 5
    [ -z "$summary" ] && tail -n 5 "$log"
    # The whole report, for the verdict's reader (run.sh --all keeps it under OUT/sanitizer/).
    if [ -n "${UM_SANITIZE_LOGS:-}" ]; then
      mkdir -p "$UM_SANITIZE_LOGS"
      grep -E '^=========|^test |panicked' "$log" | head -n 400 >"$UM_SANITIZE_LOGS/$tool-$(basename "$prog").log"
    fi
    rm -f "$log"
    return 1
  fi
  # The program's own result under the tool (examples' timing checks may not hold while the
  # tool slows every kernel): reported, not counted. Where the program failed, which tests did
  # and why go to OUT/sanitizer/TOOL-PROG.program.log, and their names to the output.
  echo "ok  $tool $(basename "$prog"): ${summary} (program exit $rc)"
  if [ "$rc" != 0 ]; then
    # To the output as well as to the log: a call returns only so many files.
    grep -E "^test .*(FAILED|timed out)|deadlock: " "$log" | head -n 10 | sed 's/^/    program: /'
    grep -vE '^=========' "$log" | grep -E -A6 '^---- |panicked|deadlock: |^Error' | head -n 40 |
      cut -c1-600 | sed 's/^/    program: /'
    if [ -n "${UM_SANITIZE_LOGS:-}" ]; then
      mkdir -p "$UM_SANITIZE_LOGS"
      { grep -vE '^=========' "$log" | grep -E -A12 '^---- |FAILED|panicked|deadlock: |^Error|error' |
        head -n 200; echo "-- the output's last lines"; grep -vE '^=========' "$log" | tail -n 15; } \
        >"$UM_SANITIZE_LOGS/$tool-$(basename "$prog").program.log"
    fi
  fi
  # The verdict line's note on the program's own result (the tool's verdict is the summary):
  # which tests failed under the tool, or the example's exit status.
  local failed_tests
  failed_tests=$(grep -E '^test .* FAILED$' "$log" | sed 's/^test //; s/ \.\.\. FAILED$//' | tr '\n' ' ')
  if [ "$rc" != 0 ]; then
    program_note="; its own run under the tool failed (exit $rc${failed_tests:+: ${failed_tests% }})"
  fi
  rm -f "$log"
  [ "$nccl_prog" = excluded ] && return 4
  return 0
}

# Programs that use every GPU of the machine where there are two or more (the two-GPU
# programs, and those that use a second device when one exists): under the sanitizers they run
# one at a time with every GPU; every other program runs on one GPU of its own, beside others.
uses_every_gpu() {
  two_gpu_only "$(basename "$1")" && return 0
  case "$1" in tests/gpu_mirrored | examples/pipeline) return 0 ;; esac
  return 1
}

# tracking_failure_only LOG: whether racecheck's report in LOG is its own internal error
# "Detected a failure to track a kernel launch" and nothing else: every line the tool printed
# is that error, its banner, a blank or a summary, and the summaries count as many errors as
# there were such lines, and no warning. The tool then says that its records "might be
# incomplete": the run is not a verdict either way. The C++ reproducer showed the same error
# without um, for 8 host threads each launching on a stream created per round and waiting by
# stream callback, three processes at once (1 run in 24, H200, 2026-11-23): async_requests'
# pattern, which racecheck reported once in 6 runs (2x H200) and once in 30 (H200).
tracking_error="Internal Sanitizer Error: Detected a failure to track a kernel launch"
#
# The tool's lines are read from their banner ("========= ") wherever it stands in a line: the
# test harness prints "test NAME ... " without a newline before the test runs, so the tool's
# line can follow it ("test x ... ========= Internal Sanitizer Error: ...", H100, 2026-11-28).
tracking_failure_only() {
  local log=$1 internal other sums tool_lines
  tool_lines=$(grep -oE "=========.*" "$log")
  internal=$(printf '%s\n' "$tool_lines" | grep -c "^========= $tracking_error")
  [ "$internal" -gt 0 ] || return 1
  other=$(printf '%s\n' "$tool_lines" | grep -E "^=========" | grep -vcE "^=========[[:space:]]*$|^========= COMPUTE-SANITIZER|^========= $tracking_error|^========= RACECHECK SUMMARY: |^========= Target application returned an error")
  [ "$other" = 0 ] || return 1
  sums=$(printf '%s\n' "$tool_lines" | grep -E "^========= RACECHECK SUMMARY: ")
  [ -n "$sums" ] || return 1
  # Every summary must read "N hazard(s) displayed (E error(s), W warning(s))"; the Es must add
  # up to the internal errors and the Ws to 0.
  echo "$sums" | awk -v want="$internal" '
    match($0, /RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)/) {
      split(substr($0, RSTART, RLENGTH), f, /[ (,]+/)
      errors += f[6]; warnings += f[8]; ok++; next
    }
    { bad = 1 }
    END { exit !(ok > 0 && !bad && errors == want && warnings == 0) }'
}

# tracking_repro_note: the C++ reproducer (no um) of that error, in async_requests' pattern, 3
# processes at once under racecheck, up to UM_TRACK_REPRO_ROUNDS (default 10) rounds, stopping
# at the first run that reports it: what it showed, for the verdict line.
tracking_repro_note() {
  local what="bench/racecheck_repro.cu, no um, 8 host threads each launching 2 kernels a round on a stream created per round and waiting by stream callback, 3 processes at once under racecheck"
  if [ -z "$repro_built" ]; then
    echo "$what: not run (nvcc could not build bench/racecheck_repro.cu)"
    return
  fi
  local exe=${repro_built%% *} ptx_args=${repro_built#* } dir r c runs=0 hit=""
  local rounds=${UM_TRACK_REPRO_ROUNDS:-10}
  dir=$(mktemp -d)
  for ((r = 1; r <= rounds; r++)); do
    for c in 1 2 3; do
      # shellcheck disable=SC2086
      timeout -k 5 60 "$cs" --tool racecheck --report-api-errors no "$exe" --api driver \
        --stream per-iter --wait callback --launches 2 --iters 8 --threads 8 $ptx_args \
        >"$dir/$r.$c.log" 2>&1 &
    done
    wait
    runs=$((runs + 3))
    hit=$(grep -l "$tracking_error" "$dir/$r".*.log 2>/dev/null | head -n 1)
    [ -n "$hit" ] && break
  done
  if [ -n "$hit" ]; then
    echo "$what: the same error in round $r ($runs runs): $(grep -m 1 -oE 'RACECHECK SUMMARY.*' "$hit" || echo 'no summary')"
  else
    echo "$what: not shown in $runs runs this time (it was in 1 run of 24 on an H200, 2026-11-23)"
  fi
  rm -rf "$dir"
}

# sanitize_retrying TOOL PROGRAM NOTE_FILE [ENV...]: sanitize_one, run again (up to
# UM_RACECHECK_RERUNS times, default 2) while racecheck's run is incomplete (return 5 above); a
# complete run is the verdict. The incomplete runs' lines go to stderr (the program's output in
# the log); NOTE_FILE gets sanitize_one's program note, after a note on the incomplete runs.
sanitize_retrying() {
  local tool=$1 prog=$2 note_file=$3
  shift 3
  local tries=0 line rc
  while :; do
    line=$(program_note=""; sanitize_one "$tool" "$prog" "$@"; rc_one=$?; echo "$program_note" >"$note_file.one"; exit $rc_one)
    rc=$?
    [ "$rc" = 5 ] && [ "$tries" -lt "${UM_RACECHECK_RERUNS:-2}" ] || break
    tries=$((tries + 1))
    echo "$line" >&2
  done
  local pnote
  pnote=$(cat "$note_file.one" 2>/dev/null)
  rm -f "$note_file.one"
  if [ "$tries" -gt 0 ]; then
    local first="the first $tries"
    [ "$tries" = 1 ] && first="the first"
    local reran="run $((tries + 1)) of $((tries + 1)): $first incomplete (racecheck's own \"$tracking_error\", no hazard records)"
    [ "$rc" = 5 ] && reran="every one of $((tries + 1)) runs incomplete (racecheck's own \"$tracking_error\")"
    pnote=" ($reran; the same error without um: $(once tracking-repro tracking_repro_note))$pnote"
  fi
  echo "$pnote" >"$note_file"
  echo "$line"
  return "$rc"
}

# sanitize_prog TOOL PROGRAM LINE_FILE: PROGRAM under TOOL, with its exclusions and notes;
# prints what it saw, writes its verdict line to LINE_FILE; returns 0 when clean.
sanitize_prog() {
  local tool=$1 prog=$2 vline=$3
  local line note=""
  if [ "$tool" = racecheck ] && [ "$prog" = examples/per_thread_streams ]; then
    local pt_note_file
    pt_note_file=$(mktemp)
    line=$(sanitize_retrying "$tool" "$prog" "$pt_note_file" UM_ONLY_PER_THREAD=1)
    local ok=$?
    local retry_note
    retry_note=$(cat "$pt_note_file")
    rm -f "$pt_note_file"
    local repro="not run (nvcc could not build bench/racecheck_repro.cu)"
    if [ -n "$repro_built_cmd" ]; then
      local rlog
      rlog=$(mktemp)
      # shellcheck disable=SC2086
      timeout -k 10 120 "$cs" --tool racecheck --report-api-errors no $repro_built_cmd \
        >"$rlog" 2>&1 || true
      repro=$(grep -oE "RACECHECK SUMMARY.*|Internal Sanitizer Error:.*" "$rlog" | head -n 1)
      repro="${repro:-no summary}"
      rm -f "$rlog"
    fi
    note="; legacy half excluded: reproduced without um (bench/racecheck_repro.cu, 8 host threads on the legacy stream: ${repro})"
    echo "$line$note"
    if [ "$ok" = 0 ]; then
      echo "$tool $(basename "$prog"): clean (per-thread half)$retry_note$note" >"$vline"
      return 0
    else
      line=${line#!!! }
      echo "$tool $(basename "$prog"): ERRORS: ${line#'??? '}" >"$vline"
      return 1
    fi
  fi
  local envs=()
  [ "$prog" = tests/gpu_nccl ] && note=" (its killed-rank and hostile-abort tests skipped, as the fault tests are)"
  if [ "$tool" = racecheck ] && [ "$prog" = tests/gpu_stress ]; then
    # racecheck slows 16 host threads' launches by orders of magnitude: 20 iterations did not
    # finish in 9 minutes on an H100 (2026-11-22); the racecheck study ran 2.
    envs=(UM_STRESS_ITERS=2)
    note=" (2 iterations under racecheck)"
  fi
  [ "$tool" = racecheck ] && [ "$prog" = examples/multithreaded_run_task ] && note=" (3 iterations under racecheck)"
  if [ "$prog" = examples/pipeline ] && [ "$tool" = memcheck ]; then
    envs+=(UM_ONLY_ONE_GPU=1)
  fi
  case "$prog" in tests/gpu_two_devices | examples/pipeline)
    if [ "${gpus:-0}" -ge 2 ] && [ "$tool" = memcheck ]; then
      note="$note; cross-device part excluded: a kernel of device 1 reading device 0's managed memory, reproduced without um (bench/memcheck_cross_device.cu: $(once "cross-$tool" cross_device_note "$tool"))"
    fi ;;
  esac
  local t1=$SECONDS
  # sanitize_one's note on the program's own result, through a file: it runs in a subshell.
  local pnote_file
  pnote_file=$(mktemp)
  line=$(sanitize_retrying "$tool" "$prog" "$pnote_file" "${envs[@]}")
  local rc1=$?
  local program_note
  program_note=$(cat "$pnote_file")
  rm -f "$pnote_file"
  echo "    $tool $(basename "$prog"): $((SECONDS - t1)) s"
  if [ "$rc1" = 3 ]; then
    echo "$line"
    echo "$tool $(basename "$prog"): clean outside NCCL's kernels$note$program_note; ${line#*: } reproduced without um (bench/nccl_baseline.cpp under $tool: $(once "nccl-$tool" nccl_note "$tool"))" >"$vline"
    return 0
  elif [ "$rc1" = 4 ]; then
    echo "$line"
    local baseline
    if [ "$tool" = racecheck ]; then
      # Not run again: racecheck of the baseline's NCCL kernels gave no summary within 180 s
      # (2x H200, 2026-11-22), and racecheck checks one kernel's shared memory at a time, so
      # leaving NCCL's kernels out hides nothing of um's kernels.
      baseline="the C++ baseline is not run under racecheck (it gave no summary within 180 s, 2x H200, 2026-11-22): racecheck checks one kernel's shared memory at a time, so NCCL's kernels left out hide nothing of um's"
    else
      baseline="the C++ baseline without um, all of its kernels instrumented (bench/nccl_baseline.cpp under $tool): $(once "nccl-$tool" nccl_note "$tool")"
    fi
    echo "$tool $(basename "$prog"): clean outside NCCL's kernels$note$program_note; NCCL's own kernels not instrumented (--kernel-name-exclude kns=nccl); $baseline" >"$vline"
    return 0
  elif [ "$rc1" = 0 ]; then
    echo "$line"
    echo "$tool $(basename "$prog"): clean$note$program_note" >"$vline"
    return 0
  else
    echo "$line"
    local why=""
    [ "$rc1" = 5 ] && why=$program_note
    echo "$tool $(basename "$prog"): ERRORS: $(echo "$line" | head -n 1 | sed 's/^!!! //; s/^??? //')$why" >"$vline"
    return 1
  fi
}

# sanitize TOOL VERDICT_FILE: every GPU program under TOOL; sets $passed and $failed. Each
# program's verdict line goes to VERDICT_FILE as it ends. Where the machine has two or more
# GPUs, the programs of one GPU run side by side, one per GPU (CUDA_VISIBLE_DEVICES; at most
# UM_SANITIZE_GPUS at once, default every GPU), then those that use every GPU one at a time: a
# sanitizer part takes about 1/N of the time on N GPUs.
sanitize() {
  local tool=$1 verdict=${2:-/dev/null}
  export UM_STRESS_ITERS=20 UM_SANITIZE=1
  # Timelines of runs under a sanitizer (small workloads, instrumented kernels) are not the
  # examples' timelines: never write them.
  unset UM_SVG_DIR
  passed=0
  failed=0
  # The programs that use the GPU, less the fault tests (they fault on purpose; gpu_nccl's
  # killed-rank test is one, skipped in sanitize_one). The two-GPU programs where two GPUs
  # exist; the ranks that gpu_nccl starts as processes run under the tool too (compute-sanitizer
  # follows child processes), and their summaries count.
  local single=() whole=()
  for prog in "${test_programs[@]}" examples/*; do
    case "$prog" in tests/*) gpu_test_program "$prog" || continue ;; esac
    [ -e "$prog" ] || [ -n "${binary_of[$prog]:-}" ] || continue
    case "$prog" in tests/gpu_faults) continue ;; esac
    # UM_SANITIZE_ONLY="tests/a examples/b": those programs only (a part run again for them).
    if [ -n "${UM_SANITIZE_ONLY:-}" ]; then
      case " $UM_SANITIZE_ONLY " in *" $prog "*) ;; *) continue ;; esac
    fi
    if two_gpu_only "$(basename "$prog")" && [ "${gpus:-0}" -lt 2 ]; then continue; fi
    # A program whose line an earlier call of the part left (run.sh --all --resume, from its
    # partial-PART.txt): kept, not run again.
    if grep -q "^$tool $(basename "$prog"): " "$verdict" 2>/dev/null; then
      echo "=== $tool $(basename "$prog"): kept from an earlier call"
      continue
    fi
    if [ "${gpus:-0}" -ge 2 ] && uses_every_gpu "$prog"; then
      whole+=("$prog")
    else
      single+=("$prog")
    fi
  done
  local slots=${UM_SANITIZE_GPUS:-${gpus:-1}}
  [ "$slots" -ge 1 ] 2>/dev/null || slots=1
  [ "${gpus:-0}" -ge 2 ] || slots=1
  local work
  work=$(mktemp -d)
  # One job per program: its output, verdict line and status in $work, collected as it ends.
  local -A slot_pid=() slot_prog=()
  collect() {
    local k=$1 p=${slot_prog[$1]} name
    name=$(basename "$p")
    cat "$work/$name.out"
    if [ "$(cat "$work/$name.rc" 2>/dev/null)" = 0 ]; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
    if [ -s "$work/$name.line" ]; then
      cat "$work/$name.line" >>"$verdict"
    else
      echo "$tool $name: ERRORS: no verdict line (the job ended early)" >>"$verdict"
    fi
    slot_pid[$k]=""
  }
  run_job() {
    local k=$1 p=$2 name
    name=$(basename "$p")
    (
      [ -n "$k" ] && export CUDA_VISIBLE_DEVICES=$k
      sanitize_prog "$tool" "$p" "$work/$name.line" >"$work/$name.body" 2>&1
      echo $? >"$work/$name.rc"
      { if [ -n "$k" ]; then echo "    $tool $name: on GPU $k"; fi; cat "$work/$name.body"; } >"$work/$name.out"
    ) &
    slot_pid[${k:-0}]=$!
    slot_prog[${k:-0}]=$p
  }
  local p k free
  if [ "$slots" -gt 1 ]; then
    for p in "${single[@]}"; do
      # The first free GPU; else wait for a job to end.
      while :; do
        free=""
        for ((k = 0; k < slots; k++)); do
          if [ -z "${slot_pid[$k]:-}" ]; then
            free=$k
            break
          fi
          if ! kill -0 "${slot_pid[$k]}" 2>/dev/null; then
            wait "${slot_pid[$k]}" 2>/dev/null
            collect "$k"
            free=$k
            break
          fi
        done
        [ -n "$free" ] && break
        wait -n 2>/dev/null || sleep 1
      done
      run_job "$free" "$p"
    done
    for ((k = 0; k < slots; k++)); do
      if [ -n "${slot_pid[$k]:-}" ]; then
        wait "${slot_pid[$k]}" 2>/dev/null
        collect "$k"
      fi
    done
    single=()
  fi
  for p in "${single[@]}" "${whole[@]}"; do
    run_job "" "$p"
    wait "${slot_pid[0]}" 2>/dev/null
    collect 0
  done
  rm -rf "$work"
  echo "$tool: $passed programs clean, $failed with errors"
}

# The C++ reproducer of memcheck's and initcheck's cross-device report (no um): its summary
# under TOOL, or why it did not run.
cross_device_note() {
  local tool=$1 dir
  dir=$(mktemp -d)
  if ! "$nvcc" -O2 -std=c++17 -o "$dir/cross" "$bundle/bench/memcheck_cross_device.cu" -lcuda >/dev/null 2>&1; then
    echo "not run (nvcc could not build bench/memcheck_cross_device.cu)"
    rm -rf "$dir"
    return
  fi
  local log
  log=$(timeout -k 10 120 "$cs" --tool "$tool" "$dir/cross" 2>&1)
  echo "$(echo "$log" | grep -oE "ERROR SUMMARY: [0-9]+ errors?" | head -n 1); $(echo "$log" | grep -oE "[0-9]+ of [0-9]+ values wrong" | head -n 1)"
  rm -rf "$dir"
}

# The C++ NCCL baseline (no um) under TOOL, for the reports inside NCCL's own kernels: its
# summary, or why it did not run.
nccl_note() {
  local tool=$1 dir
  dir=$(mktemp -d)
  if ! "$nvcc" -O3 -o "$dir/nccl_baseline" "$bundle/bench/nccl_baseline.cpp" -lnccl -lcuda >/dev/null 2>&1 &&
    ! "$nvcc" -O3 -o "$dir/nccl_baseline" "$bundle/bench/nccl_baseline.cpp" -l:libnccl.so.2 -lcuda >/dev/null 2>&1; then
    echo "not run (nvcc could not build bench/nccl_baseline.cpp)"
    rm -rf "$dir"
    return
  fi
  local log
  local limit=${UM_NCCL_NOTE_LIMIT_S:-180}
  log=$(timeout -k 10 "$limit" "$cs" --tool "$tool" --print-limit 1000000 "$dir/nccl_baseline" allreduce --sizes 8,1048576,16777216 2>&1)
  local where summary
  where=$(echo "$log" | grep -E "^=========  +at " | grep -oE "nccl[A-Za-z0-9_]+" | sort -u | head -n 4 | tr '\n' ' ')
  summary=$(echo "$log" | grep -oE "ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: [0-9]+ hazards?" | head -n 1)
  if [ -z "$summary" ]; then
    # Racecheck of NCCL's kernels did not end within 180 s (2x H200, 2026-11-22).
    echo "no summary within ${limit} s"
  else
    echo "$summary, at ${where:-no NCCL function}"
  fi
  rm -rf "$dir"
}

# once KEY COMMAND [ARG ...]: COMMAND's output, run once per run.sh process and kept under
# KEY (in files: the programs under a sanitizer run in subshells, side by side), e.g. the
# reproducers' summaries per tool.
once_dir=$(mktemp -d)
trap 'rm -rf "$once_dir"' EXIT
once() {
  local key=$1
  shift
  if [ ! -f "$once_dir/$key" ]; then
    "$@" >"$once_dir/$key.tmp"
    mv "$once_dir/$key.tmp" "$once_dir/$key"
  fi
  cat "$once_dir/$key"
}

# The command line of the reproducer's legacy run (set once the reproducer is built).
repro_built_cmd=""
build_repro_cmd() {
  build_repro && repro_built_cmd="${repro_built%% *} --api driver --stream legacy --threads 8 ${repro_built#* }"
}

# ------------------------------------------------------------------ --all
if [ "${1:-}" = "--all" ]; then
  out=${2:?usage: run.sh --all OUT [--parts P1,P2,..] [--resume VERDICT]}
  shift 2
  parts="normal,emulated,memcheck,racecheck,synccheck,initcheck"
  resume=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --parts) parts=$2; shift 2 ;;
      --resume) resume=$2; shift 2 ;;
      *) echo "run.sh --all: unknown option $1" >&2; exit 2 ;;
    esac
  done
  mkdir -p "$out/docs"
  out=$(cd "$out" && pwd)
  verdict="$out/verdict.txt"
  # The parts an earlier run did, read before OUT's verdict is written again: --resume may name
  # OUT's own verdict.txt (one run continued in one folder, call after call, on a machine that
  # keeps it).
  kept=$(mktemp)
  commit=$(cat "$bundle/COMMIT" 2>/dev/null || echo unknown)
  commit_line="$commit"
  if [ -n "$resume" ] && [ -f "$resume" ]; then
    # Only parts of this bundle's commit are kept, unless UM_RESUME_ANY_COMMIT=1 says to keep
    # another's too (then the commit line names both): a verdict of one run is of one bundle.
    earlier_commit=$(sed -n 's/^commit: //p' "$resume" | head -n 1)
    if [ -z "$earlier_commit" ] || [ "$earlier_commit" = "$commit" ]; then
      awk '/^== part /{keep=1} keep' "$resume" >"$kept"
    elif [ -n "${UM_RESUME_ANY_COMMIT:-}" ]; then
      awk '/^== part /{keep=1} keep' "$resume" >"$kept"
      commit_line="$commit (parts kept from $earlier_commit)"
      echo "run.sh --all: keeping the parts of $earlier_commit under $commit (UM_RESUME_ANY_COMMIT)" >&2
    else
      echo "run.sh --all: $resume is of commit $earlier_commit, this bundle of $commit: nothing of it kept (UM_RESUME_ANY_COMMIT=1 keeps it)" >&2
      resume=""
    fi
  fi
  {
    echo "# um GPU verdict (run.sh --all)"
    echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "gpus: ${gpus:-0}"
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "sanitizer: $("$cs" --version 2>/dev/null | grep -i version | head -n 1)"
    echo "date: $(date -u +%F)"
    echo "commit: $commit_line"
  } >"$verdict"
  # Parts an earlier run did: kept as they are.
  cat "$kept" >>"$verdict"
  rm -f "$kept"
  render() {
    python3 "$bundle/reliability_doc.py" "$verdict" "$bundle/reliability-notes.md" \
      >"$out/docs/reliability.md" 2>/dev/null || echo "run.sh --all: could not render reliability.md" >&2
  }
  render
  build_repro_cmd || true
  for part in ${parts//,/ }; do
    if grep -q "^== part $part:" "$verdict"; then
      echo "=== part $part: kept from $resume"
      continue
    fi
    t0=$(date +%s)
    # The part's lines, one per program as it ends, kept under OUT until the part is done: a
    # call cut short leaves them, and --resume with that call's verdict.txt continues a
    # sanitizer part from them (the programs they name are not run again).
    body="$out/partial-$part.txt"
    continued=""
    earlier="${resume:+$(dirname "$resume")/partial-$part.txt}"
    if [ -n "$resume" ] && [[ "$part" == *check ]] && [ -s "$earlier" ]; then
      # From another folder it is copied; in OUT itself (the same folder resumed) it is kept.
      [ "$earlier" -ef "$body" ] || cp "$earlier" "$body"
      continued=", $(wc -l <"$body") programs from an earlier call"
      echo "=== part $part: continued; $(wc -l <"$body") programs kept from $earlier"
    else
      : >"$body"
    fi
    case "$part" in
      normal)
        (unset UM_EMULATE_NO_CONCURRENT_ACCESS; export UM_STACKS_DIR="$out/stacks/$part"; run_all 1 "$body") ;;
      emulated)
        (export UM_EMULATE_NO_CONCURRENT_ACCESS=1 UM_STACKS_DIR="$out/stacks/$part"; run_all 1 "$body") ;;
      memcheck | racecheck | synccheck | initcheck)
        (export UM_SANITIZE_LOGS="$out/sanitizer" UM_STACKS_DIR="$out/stacks/$part"; sanitize "$part" "$body") ;;
      *) echo "run.sh --all: unknown part $part" >&2; rm -f "$body"; continue ;;
    esac
    secs=$(($(date +%s) - t0))
    # The part's line and its programs' lines reach the verdict in one rename: a call stopped
    # meanwhile leaves either the part whole or the part not there (then its partial file).
    next_verdict="$verdict.next"
    cp "$verdict" "$next_verdict"
    if [[ "$part" == *check ]]; then
      ok=$(grep -c ': clean' "$body")
      bad=$(grep -c ': ERRORS' "$body")
      # A program the tool found clean whose own tests failed under it is counted too: a
      # failure of its own is a failure of the verdict until explained (gpu_nccl, 2026-11-23).
      own=$(grep -c 'its own run under the tool failed' "$body")
      own_note=""
      [ "$own" -gt 0 ] && own_note=", $own whose own run failed"
      echo "== part $part: $ok programs clean, $bad with errors$own_note${UM_SANITIZE_ONLY:+, only $UM_SANITIZE_ONLY}$continued (${secs}s)" >>"$next_verdict"
    else
      ok=$(awk '/^test .*passed/ {p += $3} /^example .* runs passed/ {p += $3} END {print p + 0}' "$body")
      bad=$(awk '/^test .*failed/ {for (i = 1; i <= NF; i++) if ($(i+1) ~ /^failed/) f += $i} /^example .* runs passed/ {f += $5 - $3} END {print f + 0}' "$body")
      echo "== part $part: $ok passed, $bad failed (${secs}s)" >>"$next_verdict"
    fi
    cat "$body" >>"$next_verdict"
    mv "$next_verdict" "$verdict"
    rm -f "$body"
    render
  done
  tail -n +1 "$verdict" | grep -E "^(== part|device|commit|gpus)"
  ! grep -qE "^== part .*[1-9][0-9]* (failed|with errors|whose own run failed)" "$verdict"
  exit
fi

# ------------------------------------------------------------------ single modes
if [ "${1:-}" = "--emulate-no-concurrent-access" ]; then
  shift
  export UM_EMULATE_NO_CONCURRENT_ACCESS=1
  echo "mode: UM_EMULATE_NO_CONCURRENT_ACCESS=1 (every context behaves as if the device lacked concurrent managed access)"
fi
command -v nvidia-smi >/dev/null &&
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.free --format=csv,noheader

if [ "${1:-}" = "--sanitize" ]; then
  shift
  tools=("$@")
  [ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck synccheck initcheck)
  build_repro_cmd || true
  total_ok=0
  total_bad=0
  for tool in "${tools[@]}"; do
    sanitize "$tool"
    total_ok=$((total_ok + passed))
    total_bad=$((total_bad + failed))
  done
  echo "$total_ok passed, $total_bad failed"
  [ "$total_bad" = 0 ]
  exit
fi

repeat=1
examples_only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat=${2:?usage: run.sh --repeat N}; shift 2 ;;
    --examples-only) examples_only=1; shift ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
run_all "$repeat"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
