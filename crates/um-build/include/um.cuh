// um.cuh: the kernel side of um's launch contract (docs/kernels.md in the um repository).
//
// UM_SAFE_KERNEL marks a kernel whose author promises the contract; um-build then generates a
// safe launcher for it. The launcher takes `um::Linear`, a one-dimensional launch: gridDim.y,
// gridDim.z, blockDim.y and blockDim.z are 1, no dynamic shared memory, and at most 2^31 - 1
// threads in all. It fills every count parameter (`n`, `x_len`) with its buffers' length.
//
// The body must, under every such launch and for every value of its other parameters:
//   * touch each buffer only at indices below its count;
//   * write no `const` buffer, and write each element of the others from one thread, or
//     atomically (um::grid_stride_range gives each thread its own indices);
//   * touch no memory but its parameters, its locals and its static shared memory (within
//     bounds for any block of up to 1024 threads), and no `__device__` global that two
//     launches could write at once;
//   * reach each __syncthreads() from every thread of the block or from none.
#pragma once

#define UM_SAFE_KERNEL extern "C" __global__

namespace um {

// This thread's index in the one-dimensional grid, in 64 bits: it cannot wrap.
__device__ __forceinline__ unsigned long long global_index() {
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}

// Threads in the grid: the step of a grid-stride loop.
__device__ __forceinline__ unsigned long long grid_threads() {
    return (unsigned long long)gridDim.x * blockDim.x;
}

// The indices global_index(), + grid_threads(), ... below `end`: across the grid, every index
// in [0, end) exactly once, whatever the one-dimensional launch. 64-bit arithmetic: no wrap.
struct grid_stride_range {
    unsigned long long first, stop, step;
    struct iterator {
        unsigned long long i, step;
        __device__ unsigned long long operator*() const { return i; }
        __device__ iterator &operator++() {
            i += step;
            return *this;
        }
        // `<`, not `!=`: the last step may jump past `stop`.
        __device__ bool operator!=(const iterator &last) const { return i < last.i; }
    };
    __device__ iterator begin() const { return iterator{first, step}; }
    __device__ iterator end() const { return iterator{stop, step}; }
};

// for (auto i : um::indices(n)) { ... }
__device__ __forceinline__ grid_stride_range indices(unsigned long long end) {
    return grid_stride_range{global_index(), end, grid_threads()};
}

}  // namespace um
