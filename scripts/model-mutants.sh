#!/usr/bin/env bash
# Shows that the CPU model of the driver (scripts/model-test.sh) catches real defects: each patch
# of tests/model-mutants/ undoes one behaviour of the library that a past fix made (a wait, an
# event wait, a deferred free, a refusal), and the model run of the tests of that rule must then
# fail. docs/gpu-testing.md, "What the model catches".
#
#   bash scripts/model-mutants.sh                    # every patch
#   bash scripts/model-mutants.sh sync-returns-before-its-wait hand-off-skips-its-event-wait
#
# A patch's first line says what it breaks and which tests must fail:
#   # rule <N> | <test filter> | <the behaviour it breaks>
# Each patch is applied to HEAD (committed work only) in a git worktree of its own under
# target/mutants/tree, reused between runs and restored after each patch, never in this checkout;
# the tests run there on the model, filtered by the patch's filter. First the filters run on the
# unpatched tree: they must pass, or no result would mean anything. Builds share target/model's
# dependencies; each patch rebuilds um-core and what depends on it (a minute or two on 2 cores).
# Not in CI. Prints a table "patch | rule | filter | caught/missed" (also in
# target/mutants/table.txt; each run's log in target/mutants/logs/) and exits 1 if any patch was
# missed, did not apply or did not build.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
dir=tests/model-mutants
out=$root/target/mutants
tree=$out/tree
logs=$out/logs
mkdir -p "$logs"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/model}"

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for p in "$dir"/*.patch; do
        names+=("$(basename "$p" .patch)")
    done
fi

# The patch's header fields: rule, filter.
field() {
    head -n 1 "$1" | sed -e 's/^# *//' | awk -F ' [|] ' -v n="$2" '{ print $n }'
}

filters=()
for n in "${names[@]}"; do
    p=$dir/$n.patch
    if [ ! -f "$p" ]; then
        echo "model-mutants: no patch $p" >&2
        exit 2
    fi
    f=$(field "$p" 2)
    if [ -z "$f" ]; then
        echo "model-mutants: $p has no '# rule N | filter | what' first line" >&2
        exit 2
    fi
    filters+=("$f")
done

head=$(git rev-parse HEAD)
if git -C "$tree" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$tree" checkout -q -f --detach "$head"
else
    rm -rf "$tree"
    git worktree add -q --detach "$tree" "$head" || exit 2
fi
git -C "$tree" clean -fdq
# The project-local toolkit (nvcc for the kernels' build scripts), where setup made one.
if [ -e .tools ] && [ ! -e "$tree/.tools" ]; then
    ln -s "$root/.tools" "$tree/.tools"
fi

restore() {
    git -C "$tree" checkout -q -f -- . && git -C "$tree" clean -fdq
}

echo "model-mutants: the filters on the unpatched tree ($head)"
if ! (cd "$tree" && bash scripts/model-test.sh "${filters[@]}") >"$logs/unpatched.log" 2>&1; then
    echo "model-mutants: the filters fail without a patch (see $logs/unpatched.log)" >&2
    exit 2
fi

rows=()
missed=0
for n in "${names[@]}"; do
    p=$root/$dir/$n.patch
    rule=$(field "$p" 1)
    filter=$(field "$p" 2)
    log=$logs/$n.log
    restore
    if ! git -C "$tree" apply "$p" >"$log" 2>&1; then
        verdict="does not apply"
    else
        (cd "$tree" && bash scripts/model-test.sh "$filter") >>"$log" 2>&1
        rc=$?
        if [ "$rc" -eq 0 ]; then
            verdict="missed"
        elif grep -q "^test result: FAILED" "$log"; then
            verdict="caught ($(grep -c '^    gpu' "$log") failed)"
        else
            verdict="did not build (rc $rc)"
        fi
    fi
    case $verdict in caught*) ;; *) missed=$((missed + 1)) ;; esac
    rows+=("$n | $rule | $filter | $verdict")
    echo "model-mutants: $n: $verdict"
done
restore

{
    echo "patch | rule | filter | caught/missed"
    echo "--- | --- | --- | ---"
    printf '%s\n' "${rows[@]}"
} | tee "$out/table.txt"
echo "model-mutants: ${#names[@]} patches, $((${#names[@]} - missed)) caught, $missed not"
[ "$missed" -eq 0 ]
