// um.cuh: the kernel side of um's launch contract (docs/kernels.md in the um repository).
//
// UM_SAFE_KERNEL marks a kernel whose author promises the contract; um-build then generates a
// safe launcher for it. The launcher takes `um::Linear`, a one-dimensional launch: gridDim.y,
// gridDim.z, blockDim.y and blockDim.z are 1, no dynamic shared memory, and at most 2^31 - 1
// threads in all. It fills every length parameter (`um::len32` and its siblings, below) with
// the length of the buffers it counts.
//
// The body must, under every such launch and for every value of its other parameters:
//   * touch each buffer only at indices below its length;
//   * write no `const` buffer, and write each element of the others from one thread, or
//     atomically (um::grid_stride_range gives each thread its own indices);
//   * touch no memory but its parameters, its locals and its static shared memory (within
//     bounds for any block of up to 1024 threads), and no `__device__` global that two
//     launches could write at once; no dynamic (`extern __shared__`) shared memory, which
//     um-build refuses in any file with a safe kernel;
//   * reach each __syncthreads() from every thread of the block or from none, and make no
//     grid-wide or cluster-wide synchronization (a safe launch is not cooperative).
//
// Lengths. A safe kernel declares each buffer's length with a type of its own, `um::len32`,
// `um::len64`, `um::ilen32` or `um::ilen64`, never a plain integer: the launcher fills every
// such parameter in, and it is the type (checked by the compiler at each position), not the
// name, that says which parameter is a length. A length counts every buffer declared between the previous length and itself:
//   UM_SAFE_KERNEL void axpy(const float *x, float *y, float a, um::len32 n);   // n: x and y
//   UM_SAFE_KERNEL void h(const int *v, um::len32 v_len, int *bins, um::len32 bins_len);
// Each converts to its integer (`unsigned int`, `unsigned long long`, `int`, `long long`), so
// `i < n` and `um::indices(n)` read as usual.
#ifndef UM_CUH
#define UM_CUH

#define UM_SAFE_KERNEL extern "C" __global__

// um-build: the namespace below is compiled ahead of every kernel file (a file cannot redefine it)
namespace um {

// The length of the buffers before it, as `unsigned int`.
struct len32 {
    unsigned int value;
    __host__ __device__ __forceinline__ operator unsigned int() const { return value; }
};

// The length of the buffers before it, as `unsigned long long`.
struct len64 {
    unsigned long long value;
    __host__ __device__ __forceinline__ operator unsigned long long() const { return value; }
};

// The length of the buffers before it, as `int` (for loops written in `int`: the launcher
// refuses a length or grid that would overflow it).
struct ilen32 {
    int value;
    __host__ __device__ __forceinline__ operator int() const { return value; }
};

// The length of the buffers before it, as `long long`.
struct ilen64 {
    long long value;
    __host__ __device__ __forceinline__ operator long long() const { return value; }
};

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

#endif  // UM_CUH
