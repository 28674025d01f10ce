// The two kernels of the run_task loop (the CUDA Programming Guide's "Stream Attach With
// Multithreaded Host Programs"): each CPU thread iterates
// transform -> sync -> host processing -> convert on its own stream.
// Grid-stride loops (um::indices): any one-dimensional grid covers any length, each index once.
#include "um.cuh"

// data[i] = 2 * in[i] + data[i]
UM_SAFE_KERNEL void transform(const float *in, float *data, um::len32 n) {
    for (auto i : um::indices(n)) {
        data[i] = 2.0f * in[i] + data[i];
    }
}

// out[i] = data[i] / 2
UM_SAFE_KERNEL void convert(float *out, const float *data, um::len32 n) {
    for (auto i : um::indices(n)) {
        out[i] = 0.5f * data[i];
    }
}
