#!/usr/bin/env bash
# On a GPU machine (it has cuda-gdb, not gdb):
#   bash scripts/stall-stacks.sh AFTER_S OUT_FILE COMMAND [ARG ...]
# Runs COMMAND; if it still runs after AFTER_S seconds, writes the stack of every thread of it
# and of each of its descendants (a program under compute-sanitizer is the tool's child) to
# OUT_FILE with `cuda-gdb -p PID -batch`, then lets it run on and returns its exit status. For
# a program that stalls, e.g. gpu_idle_sections' Blas test under memcheck (bench/reliability-notes.md):
# which thread waits where tells a wait of um's from a driver call that does not return.
#
# UM_STALL_FROM="PATTERN@FILE" starts the AFTER_S clock only once FILE (where the caller sends
# COMMAND's output) holds a line matching PATTERN, e.g. the test that stalls beginning
# ("^test blas_handles@log.txt"; under --test-threads=1 the harness prints a test's name as it
# begins). An intermittent stall of one test of many is then caught while it lasts.
# UM_STALL_GDB_S (default 60) bounds each process's cuda-gdb. UM_GDB names another debugger
# (the runner's CI test, xtask/tests/runner.rs, gives a stand-in).
set -u
after=${1:?usage: stall-stacks.sh AFTER_S OUT_FILE COMMAND [ARG ...]}
out=${2:?usage: stall-stacks.sh AFTER_S OUT_FILE COMMAND [ARG ...]}
shift 2
gdb=${UM_GDB:-$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)}
"$@" &
pid=$!
descendants() {
  local p
  for p in $(pgrep -P "$1"); do
    echo "$p"
    descendants "$p"
  done
}
if [ -n "${UM_STALL_FROM:-}" ]; then
  pattern=${UM_STALL_FROM%@*}
  file=${UM_STALL_FROM##*@}
  while kill -0 "$pid" 2>/dev/null && ! grep -qE "$pattern" "$file" 2>/dev/null; do
    sleep 1
  done
fi
# Polled every 0.1 s: run.sh runs every program of a verdict through this script, and a
# second's poll would add up to a second to each.
deadline=$((SECONDS + after))
while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$pid" 2>/dev/null; do
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  {
    for p in "$pid" $(descendants "$pid"); do
      echo "=== pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
      # Each thread's name, state and kernel wait channel first, from /proc: they need no
      # debugger, so they are there even where cuda-gdb cannot attach.
      for t in /proc/"$p"/task/*; do
        [ -r "$t/stat" ] || continue
        echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null) state=$(cut -d' ' -f3 "$t/stat" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
      done
      timeout "${UM_STALL_GDB_S:-60}" "$gdb" -p "$p" -batch -ex 'thread apply all bt' 2>&1 | grep -vE '^\[New LWP|^warning:' | head -n 400
    done
  } >"$out"
  echo "stall-stacks: $pid still ran after ${after} s; stacks in $out"
fi
wait "$pid"
