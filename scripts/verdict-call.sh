#!/usr/bin/env bash
# One call of a GPU verdict split across calls of the device tool, from the repository root on
# the GPU machine, with target/gpu-bundle carried:
#
#   bash scripts/verdict-call.sh LIMIT_S [run.sh options]
#
# Execs the bundle's `um-xtask verdict-call` (xtask/src/verdict_call.rs): runs
# `target/gpu-bundle/run.sh --all target/all --resume target/all/verdict.txt` for at most
# LIMIT_S seconds (then stops it and every program it started: it runs under setsid, apart
# from the caller), prints the parts done so far and what failed, and copies target/all to $OUT/all.
# target/ is ignored, so on a machine that stays warm between calls target/all stays too, and
# the next call goes on where this one stopped; on a fresh machine it starts over (carry an
# earlier OUT/all as target/all to go on).
b=$(pwd)/target/gpu-bundle
[ -x "$b/um-xtask" ] || { echo "verdict-call: no $b/um-xtask (build it with scripts/gpu-bundle.sh and carry it)"; exit 2; }
exec "$b/um-xtask" verdict-call "$@"
