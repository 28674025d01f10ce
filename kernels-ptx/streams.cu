// The kernel of the multi-stream and multi-threaded examples of NVIDIA's "GPU Pro Tip: CUDA 7
// Streams Simplify Concurrency":
// x[i] = sqrt(pow(3.14159, i)) over a grid-stride loop.
#include <math.h>
#include "um.cuh"

UM_SAFE_KERNEL void kernel(float *x, um::ilen32 n) {
    for (auto i : um::indices(n)) {
        x[i] = sqrt(pow(3.14159, (double)i));
    }
}

// The post's dummy launches on the default stream: a kernel that does no work.
UM_SAFE_KERNEL void empty() {}

// t[slot] = the GPU's global nanosecond timer (%globaltimer), written by one thread (thread 0
// of block 0, whatever the grid). Launched before and after a kernel on the same stream, it
// brackets that kernel on a timeline.
UM_SAFE_KERNEL void stamp(unsigned long long *t, unsigned int slot, um::len32 n) {
    if (um::global_index() == 0 && slot < n) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        t[slot] = now;
    }
}
