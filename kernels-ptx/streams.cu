// The kernel of the multi-stream and multi-threaded examples (seed 004):
// x[i] = sqrt(pow(3.14159, i)) over a grid-stride loop.
#include <math.h>

extern "C" __global__ void kernel(float *x, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        x[i] = sqrt(pow(3.14159, (double)i));
    }
}

// The seed's dummy launches on the default stream: a kernel that does no work.
extern "C" __global__ void empty() {}

// t[slot] = the GPU's global nanosecond timer (%globaltimer), written by one thread. Launched
// before and after a kernel on the same stream, it brackets that kernel on a timeline.
extern "C" __global__ void stamp(unsigned long long *t, unsigned int slot, unsigned int n) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && slot < n) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        t[slot] = now;
    }
}
