// A simple pair of kernels for tests: one writes a buffer in place, one reads one buffer and
// writes another.

// data[i] += value
extern "C" __global__ void add_scalar(float *data, float value, unsigned int n) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        data[i] += value;
    }
}

// y[i] = a * x[i] + y[i]
extern "C" __global__ void axpy(const float *x, float *y, float a, unsigned int n) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
