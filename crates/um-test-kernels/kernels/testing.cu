// A simple pair of kernels for tests: one writes a buffer in place, one reads one buffer and
// writes another.
#include "um.cuh"

// data[i] += value
UM_SAFE_KERNEL void add_scalar(float *data, float value, um::len32 n) {
    for (auto i : um::indices(n)) {
        data[i] += value;
    }
}

// y[i] = a * x[i] + y[i]
UM_SAFE_KERNEL void axpy(const float *x, float *y, float a, um::len32 n) {
    for (auto i : um::indices(n)) {
        y[i] = a * x[i] + y[i];
    }
}

// x[idx[i]] = value for every i < n: a scatter through an index buffer. Not UM_SAFE_KERNEL:
// whether it stays in bounds and race-free depends on the indices, which um cannot see, so its
// launcher is an `unsafe fn` (docs/kernels.md). The tests use it to show that path.
extern "C" __global__ void scatter(float *x, const unsigned int *idx, float value, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[idx[i]] = value;
    }
}

// Waits until `ns` nanoseconds of the GPU's global timer (%globaltimer) have passed since the
// thread started, then data[i] += value: a kernel that takes at least `ns`, for tests and
// examples that need one stream to be busy for a known time (a handoff must make the next
// stream wait for it). A huge `ns` keeps the GPU busy that long; it touches nothing else.
UM_SAFE_KERNEL void spin_then_add(float *data, float value, unsigned long long ns, um::len32 n) {
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned long long now = start;
    while (now - start < ns) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
    for (auto i : um::indices(n)) {
        data[i] += value;
    }
}

// data[i] += value, compiled for blocks of at most 64 threads (`__launch_bounds__(64)`): a safe
// launch with a larger block is refused with `Error::BlockTooLarge` before the driver sees it.
UM_SAFE_KERNEL void __launch_bounds__(64) bounded_add(float *data, float value, um::len32 n) {
    for (auto i : um::indices(n)) {
        data[i] += value;
    }
}

// y[i] = value for every i below y's length, as a kernel declared first by a
// prototype and defined in another file. The launcher's length is the parameter whose *type*
// is `um::len32` (the compiler checks it at that position, whatever either declaration calls
// it), so `fill(s, &mut y, 1 << 30)` writes `y` only: 1 << 30 is `value`.
UM_SAFE_KERNEL void fill(float *y, unsigned int value, um::len32 n);
#include "testing_fill.cuh"
