#!/usr/bin/env bash
# Installs what `um` needs to build on a Debian or Ubuntu machine, idempotently, skipping what is
# present:
#   1. the CUDA driver library (libcuda.so) for linking: nothing when a driver is installed,
#      otherwise Debian's `libcuda1` from the contrib/non-free components of the mirror the
#      machine already uses (Ubuntu: the newest `libnvidia-compute-NNN`);
#   2. nvcc 13.0.x from PyPI into .tools/nvcc, unless the user has a toolkit (NVCC, CUDA_PATH,
#      /usr/local/cuda). 13.0 is pinned on purpose: nvidia-nvvm 13.5 emits PTX ISA 9.5, which a
#      CUDA 13.0 driver (580) refuses to load.
# Nothing needs exporting afterwards: .cargo/config.toml points cargo at .tools/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/.tools"
say() { echo "setup: $*" >&2; }
die() { echo "setup: error: $*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: cannot install system packages"
  SUDO=(sudo)
fi
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    "${SUDO[@]}" apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# ---------------------------------------------------------------- 1. the driver library
find_libcuda() {
  local p
  p=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
  if [ -z "$p" ]; then
    for d in /usr/local/nvidia/lib64 /usr/lib/wsl/lib /usr/lib64 /usr/lib/x86_64-linux-gnu; do
      [ -e "$d/libcuda.so.1" ] && { p="$d/libcuda.so.1"; break; }
    done
  fi
  echo "$p"
}

# Adds the contrib and non-free components of the Debian mirror this machine already uses, in a
# file of its own, so the machine's own sources stay untouched.
add_debian_nonfree() {
  local out=/etc/apt/sources.list.d/um-nonfree.sources
  [ -e "$out" ] && return 0
  local uri="" suites=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    # deb822: the first stanza whose URIs is a Debian mirror other than the security archive.
    read -r uri suites < <(awk '
      /^URIs:/ {u=$2} /^Suites:/ {s=""; for (i=2;i<=NF;i++) s=s (i>2?" ":"") $i}
      /^$/ { if (u != "" && u !~ /security/ && !done) { print u, s; done=1 } u=""; s="" }
      END { if (u != "" && u !~ /security/ && !done) print u, s }' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
    suites=$(awk -v u="$uri" '$1=="deb" && $2==u {print $3}' /etc/apt/sources.list | sort -u | tr '\n' ' ')
  fi
  [ -n "$uri" ] && [ -n "$suites" ] || die "cannot find this machine's Debian mirror in /etc/apt"
  say "adding contrib non-free of $uri ($suites) to $out"
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: contrib non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$uri" "$suites" | "${SUDO[@]}" tee "$out" >/dev/null
  apt_updated=0
}

libcuda=$(find_libcuda)
if [ -z "$libcuda" ]; then
  . /etc/os-release
  case "${ID:-}" in
    debian)
      add_debian_nonfree
      say "installing Debian's libcuda1 (driver library for linking; no GPU needed)"
      apt_install libcuda1
      ;;
    ubuntu)
      "${SUDO[@]}" apt-get update -qq; apt_updated=1
      pkg=$(apt-cache search --names-only '^libnvidia-compute-[0-9]+$' | awk '{print $1}' | sort -V | tail -n 1)
      [ -n "$pkg" ] || die "no libnvidia-compute package found (enable the 'restricted' component)"
      say "installing Ubuntu's $pkg (driver library for linking)"
      apt_install "$pkg"
      ;;
    *) die "unsupported distribution '${ID:-unknown}': install the NVIDIA driver library (libcuda.so.1) by hand" ;;
  esac
  "${SUDO[@]}" ldconfig
  libcuda=$(find_libcuda)
  [ -n "$libcuda" ] || die "libcuda.so.1 still missing after the install"
else
  say "driver library present: $libcuda"
fi
# cust_raw links with `-lcuda` from $CUDA_LIBRARY_PATH/lib64; a driver-only install has just
# libcuda.so.1, so give the linker the unversioned name in a folder of our own.
mkdir -p "$tools/cuda/lib64"
ln -sfn "$libcuda" "$tools/cuda/lib64/libcuda.so"

# ---------------------------------------------------------------- 2. nvcc
# Pins: every wheel of the toolchain at 13.0.x (see the header). README's Quick start and
# um-build's "nvcc not found" give users the same pins (`cargo xtask readme-check` compares).
NVCC_PINS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-nvvm==13.0.88)
local_nvcc="$tools/nvcc/nvidia/cu13/bin/nvcc"
stamp="$tools/nvcc/.um-pins"
user_nvcc=""
if [ -n "${NVCC:-}" ] && [ -x "${NVCC}" ]; then user_nvcc=$NVCC
elif [ -n "${CUDA_PATH:-}" ] && [ -x "$CUDA_PATH/bin/nvcc" ]; then user_nvcc=$CUDA_PATH/bin/nvcc
elif [ -x /usr/local/cuda/bin/nvcc ]; then user_nvcc=/usr/local/cuda/bin/nvcc
fi
if [ -n "$user_nvcc" ]; then
  say "using the user's nvcc: $user_nvcc"
elif [ -x "$local_nvcc" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${NVCC_PINS[*]}" ]; then
  say "project nvcc present: $local_nvcc"
else
  command -v python3 >/dev/null || apt_install python3
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  say "installing ${NVCC_PINS[*]} into .tools/nvcc"
  rm -rf "$tools/nvcc"
  # --no-deps: the pins are the whole toolchain; letting pip resolve dependencies would pull an
  # unpinned (newer) nvidia-nvvm. --target keeps it out of any Python environment.
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: \
    --target "$tools/nvcc" "${NVCC_PINS[@]}"
  echo "${NVCC_PINS[*]}" > "$stamp"
fi
# nvcc preprocesses .cu files with the host C++ compiler.
command -v g++ >/dev/null || { say "installing g++ (nvcc's host compiler)"; apt_install g++; }
say "ready"
