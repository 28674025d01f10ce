// A simple pair of kernels for tests: one writes a buffer in place, one reads one buffer and
// writes another.
#include "um.cuh"

// data[i] += value
UM_SAFE_KERNEL void add_scalar(float *data, float value, unsigned int n) {
    for (auto i : um::indices(n)) {
        data[i] += value;
    }
}

// y[i] = a * x[i] + y[i]
UM_SAFE_KERNEL void axpy(const float *x, float *y, float a, unsigned int n) {
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
