// The two kernels of the run_task loop (seed 000): each CPU thread iterates
// transform -> sync -> host processing -> convert on its own stream.
// Grid-stride loops: any grid covers any length.

// data[i] = 2 * in[i] + data[i]
extern "C" __global__ void transform(const float *in, float *data, unsigned int n) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        data[i] = 2.0f * in[i] + data[i];
    }
}

// out[i] = data[i] / 2
extern "C" __global__ void convert(float *out, const float *data, unsigned int n) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        out[i] = 0.5f * data[i];
    }
}
