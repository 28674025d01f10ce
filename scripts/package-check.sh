#!/usr/bin/env bash
# What crates.io, docs.rs and a user without nvcc get. Run by .ci/run; needs what
# scripts/setup.sh installs, and the network (crates.io's index, for the packages' dependencies).
#
#  1. `cargo package --workspace`, verified: cargo builds every package from its own .crate
#     file, the `publish = false` ones (own-kernels, um-test-kernels, xtask) too, which cargo
#     packages with the others. Prints each published package's files and size. What it leaves
#     in target/package/ is what `cargo xtask readme-check` (run next by .ci/run) builds on.
#  2. With no nvcc anywhere um-build looks (off PATH; NVCC, CUDA_PATH, UM_LOCAL_NVCC unset or
#     empty; HOME an empty folder, cargo and rustup keeping theirs):
#     a. `DOCS_RS=1 cargo doc` of the workspace, without the driver library either: the docs
#        must hold the launchers of um's own kernels;
#     b. a fresh crate with no kernels of its own, depending on `um-cuda = "0.1"` patched to the
#        unpacked .crate files: it builds (the driver library is needed to link), documents
#        with DOCS_RS=1, and runs up to the GPU.
#  3. `cargo doc -p um-cuda --no-deps` into an empty folder: no link of um's docs renders as
#     literal brackets.
#  4. Where rustup has the toolchain of `rust-version`, the packages build with it.
# The last line is "package-check: ok" or the step that failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
say() { echo "package-check: $*"; }
die() { echo "package-check: FAILED: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
packages=(um-build um-core um-kernels um-cublas um-curand um-cusparse um-nccl um-cuda)
# Packaged and verified as well, never published.
unpublished=(own-kernels um-test-kernels)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

# ---------------------------------------------------------------- 1. package and verify
# cargo verifies each package against the others through a local registry in
# target/package/tmp-registry, and extracts them under $CARGO_HOME/registry/src/-<hash of that
# path>/, where it reuses a folder of the same name and version from an earlier run: a second
# run from the same checkout path verified against stale sources (seen 2026-11-22: um-cublas
# against an um-core from before a rename). Those folders are removed first; crates.io's own
# (`index.crates.io-*`) are never touched.
# The verification builds in target/package/ are keyed on name and version too (a registry
# crate is taken to never change), so they go as well.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
for p in "${packages[@]}" "${unpublished[@]}"; do
  rm -rf "$cargo_home"/registry/src/-*/"$p-$version"
done
rm -rf "$cargo_home"/registry/src/-*/xtask-0.0.0
rm -rf target/package
# --allow-dirty: the check is of the files as they are; a clean clone has nothing dirty.
# (Its warnings that tests, examples and benchmarks are not in the packages are left out.)
cargo package --workspace --allow-dirty >"$tmp/package.log" 2>&1 ||
  { grep -v '^warning: ignoring ' "$tmp/package.log" >&2; die "cargo package"; }
grep -E '^ +(Packaged|Verifying|Finished)' "$tmp/package.log"
for p in "${packages[@]}"; do
  crate=target/package/$p-$version.crate
  [ -f "$crate" ] || die "$crate is missing"
  say "$p: $(tar tzf "$crate" | grep -vc '/$') files, $(stat -c %s "$crate") bytes (.crate)"
done

# ---------------------------------------------------------------- 2. without nvcc
nonvcc_path=""
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -e "$d/nvcc" ] || nonvcc_path=${nonvcc_path:+$nonvcc_path:}$d
done
if [ -e /usr/local/cuda/bin/nvcc ]; then
  say "NOTE: /usr/local/cuda/bin/nvcc exists and um-build finds it there: step 2 runs with it"
fi
# UM_LOCAL_NVCC empty rather than unset: the workspace's .cargo/config.toml would set it. HOME
# an empty folder: um-build also looks under ~/.local/share/um-cuda/ (README's pip install).
mkdir -p "$tmp/home"
no_nvcc() {
  env -u NVCC -u CUDA_PATH UM_LOCAL_NVCC= PATH="$nonvcc_path" HOME="$tmp/home" \
    CARGO_HOME="$cargo_home" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" "$@"
}
prebuilt_said() { grep -q 'um-build: nvcc not found: using the prebuilt PTX of' "$1"; }

# 2a. docs.rs: DOCS_RS=1, no nvcc, no driver library (cust_raw skips its link step).
docs=target/ci-docs-rs
no_nvcc env DOCS_RS=1 CUDA_LIBRARY_PATH= CARGO_TARGET_DIR=$docs RUSTDOCFLAGS="-D warnings" \
  cargo doc --workspace --exclude own-kernels --exclude um-test-kernels --exclude xtask --no-deps >"$tmp/docs.log" 2>&1 ||
  { cat "$tmp/docs.log" >&2; die "DOCS_RS=1 cargo doc without nvcc"; }
prebuilt_said "$tmp/docs.log" || { cat "$tmp/docs.log" >&2; die "um-kernels did not use its shipped PTX"; }
for page in um_kernels/run_task/fn.transform.html um/kernels/run_task/fn.transform.html um/struct.Managed.html; do
  [ -f "$docs/doc/$page" ] || die "DOCS_RS=1 cargo doc wrote no $page"
done
say "DOCS_RS=1 cargo doc --workspace without nvcc or the driver library: ok ($(ls "$docs/doc/um_kernels/run_task" | grep -c '^fn\.') launcher pages in um_kernels::run_task)"

# 2b. a crate with no kernels of its own, against the packaged crates.
mkdir -p "$tmp/packages" "$tmp/user/src"
for p in "${packages[@]}"; do tar xzf "target/package/$p-$version.crate" -C "$tmp/packages"; done
{
  printf '[package]\nname = "no-kernels"\nversion = "0.1.0"\nedition = "2024"\n\n'
  printf '[dependencies]\num-cuda = "0.1"\n\n'
  printf '# The packaged crates, as crates.io would serve them.\n[patch.crates-io]\n'
  for p in "${packages[@]}"; do printf '%s = { path = "%s" }\n' "$p" "$tmp/packages/$p-$version"; done
  printf '\n[workspace]\n'
} >"$tmp/user/Cargo.toml"
cat >"$tmp/user/src/main.rs" <<'EOF'
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let input = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0])?;
    let data = Managed::<[f32]>::zeroed_slice(&ctx, 3)?;
    let data = ctx.with_stream(StreamOptions::new(), |s| {
        let (input, mut data) = (input.attach(s)?, data.attach(s)?);
        um::kernels::run_task::transform(s, &input, &mut data)?; // data[i] += 2 * input[i]
        data.sync()
    })?;
    println!("{:?}", &data[..]);
    Ok(())
}
EOF
cp Cargo.lock "$tmp/user/Cargo.lock"
user_target=$root/target/ci-no-nvcc
(cd "$tmp/user" && no_nvcc env CUDA_LIBRARY_PATH="$root/.tools/cuda" CARGO_TARGET_DIR="$user_target" \
  cargo build) >"$tmp/user.log" 2>&1 || { cat "$tmp/user.log" >&2; die "the crate without kernels did not build without nvcc"; }
prebuilt_said "$tmp/user.log" || { cat "$tmp/user.log" >&2; die "um-kernels did not use its shipped PTX"; }
say "a crate with no kernels, on the packaged um-cuda, builds without nvcc: ok"
(cd "$tmp/user" && no_nvcc env DOCS_RS=1 CUDA_LIBRARY_PATH= CARGO_TARGET_DIR="$user_target" \
  cargo doc) >"$tmp/user-doc.log" 2>&1 || { cat "$tmp/user-doc.log" >&2; die "DOCS_RS=1 cargo doc of the packaged crates"; }
[ -f "$user_target/doc/um/kernels/run_task/fn.transform.html" ] || die "no launcher page in the packaged crates' docs"
say "DOCS_RS=1 cargo doc of it and the packaged crates, without nvcc or the driver library: ok"
set +e
out=$("$user_target/debug/no-kernels" 2>&1)
code=$?
set -e
case "$code:$out" in
  0:*"[2.0, 4.0, 6.0]"*) say "it ran on the GPU: $out" ;;
  1:*NoDevice*) say "it runs up to the GPU: no device here (Error::NoDevice)" ;;
  *) die "the crate without kernels exited $code: $out" ;;
esac

# ---------------------------------------------------------------- 3. um's front page alone
front=target/ci-front-page
rm -rf "$front/doc"
CARGO_TARGET_DIR=$front RUSTDOCFLAGS="-D warnings" cargo doc -p um-cuda --no-deps >"$tmp/front.log" 2>&1 ||
  { cat "$tmp/front.log" >&2; die "cargo doc -p um-cuda --no-deps"; }
# One text is cust's, not um's: its blanket `DeviceCopyExt::as_dbox` ("Makes a new [`DeviceBox`]
# from this value"), shown under "Blanket Implementations" on the page of every type of um's
# that is `DeviceCopy` (`um::cublas::F16`, `Bf16`), links `DeviceBox` in cust's docs, which a
# `--no-deps` build cannot resolve. Every other bracketed name fails the check.
if grep -rhoE '\[<code>[^<]*</code>\]' "$front/doc/um" | grep -vx '\[<code>DeviceBox</code>\]' >"$tmp/brackets"; then
  sort -u "$tmp/brackets" >&2
  die "links of um's docs render as brackets with -p um-cuda --no-deps"
fi
say "cargo doc -p um-cuda --no-deps: every link renders"

# ---------------------------------------------------------------- 4. rust-version
# Where rustup has that toolchain: the packages (not their tests and benchmarks, whose
# dev-dependencies need newer compilers) and a crate with kernels build with it.
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
if rustup run "$msrv" rustc --version >/dev/null 2>&1; then
  CARGO_TARGET_DIR=target/ci-msrv cargo "+$msrv" build -p um-cuda -p um-build -p own-kernels >"$tmp/msrv.log" 2>&1 ||
    { cat "$tmp/msrv.log" >&2; die "rust-version $msrv: the packages do not build with it"; }
  say "rust-version $msrv: um-cuda, um-build and own-kernels build with $(rustup run "$msrv" rustc --version)"
else
  say "rust-version $msrv: not checked, no such toolchain (rustup toolchain install $msrv --profile minimal)"
fi
say "ok"
