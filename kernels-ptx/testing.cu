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

// Waits until `ns` nanoseconds of the GPU's global timer (%globaltimer) have passed since the
// block started, then data[i] += value: a kernel that takes at least `ns`, for tests and
// examples that need one stream to be busy for a known time (a handoff must make the next
// stream wait for it). A huge `ns` keeps the GPU busy that long; it touches nothing else.
extern "C" __global__ void spin_then_add(float *data, float value, unsigned long long ns, unsigned int n) {
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned long long now = start;
    while (now - start < ns) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        data[i] += value;
    }
}
