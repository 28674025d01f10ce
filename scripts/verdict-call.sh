#!/usr/bin/env bash
# One call of a GPU verdict split across calls of the device tool, from the repository root on
# the GPU machine, with target/gpu-bundle carried:
#
#   bash scripts/verdict-call.sh LIMIT_S [run.sh options]
#
# Runs `target/gpu-bundle/run.sh --all target/all --resume target/all/verdict.txt` for at most
# LIMIT_S seconds (then stops it and every program it started: it runs in a process group of
# its own), prints the parts done so far and what failed, and copies target/all to $OUT/all.
# target/ is ignored, so on a machine that stays warm between calls target/all stays too, and
# the next call goes on where this one stopped; on a fresh machine it starts over (carry an
# earlier OUT/all as target/all to go on).
set -u
limit=${1:?usage: verdict-call.sh LIMIT_S [run.sh options]}
shift
dir=$(pwd)/target/all # absolute: run.sh works from the bundle folder
mkdir -p "$dir"
t0=$(date +%s)
setsid bash target/gpu-bundle/run.sh --all "$dir" --resume "$dir/verdict.txt" "$@" >>"$dir/log.txt" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null && [ $(($(date +%s) - t0)) -lt "$limit" ]; do sleep 2; done
if kill -0 "$pid" 2>/dev/null; then
  echo "verdict-call: stopped at ${limit}s; the next call goes on from $dir"
  # Every process under setsid's new id (run.sh's pid, `pkill -s`): `timeout`, which run.sh
  # starts every program under, moves itself into a process group of its own, so the group alone
  # would miss it and its program.
  pkill -TERM -s "$pid" 2>/dev/null
  sleep 5
  pkill -KILL -s "$pid" 2>/dev/null
fi
wait "$pid"
echo "verdict-call: run.sh exit $? after $(($(date +%s) - t0))s"
grep -E "^(device|commit|gpus):|^== part" "$dir/verdict.txt" 2>/dev/null
grep -hE "ERRORS|own run under the tool failed|[1-9][0-9]* failed|of [0-9]+ runs passed" "$dir/verdict.txt" 2>/dev/null |
  grep -vE "(: 0 failed|([0-9]+) of \2 runs passed)$" | cut -c1-400
for p in "$dir"/partial-*; do [ -f "$p" ] && echo "verdict-call: $(basename "$p"): $(wc -l <"$p") programs done"; done
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/all"
  cp -r "$dir/." "$OUT/all/"
fi
