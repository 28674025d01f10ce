// The kernel of the multi-stream and multi-threaded examples (seed 004):
// x[i] = sqrt(pow(3.14159, i)) over a grid-stride loop.
#include <math.h>

extern "C" __global__ void kernel(float *x, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        x[i] = sqrt(pow(3.14159, (double)i));
    }
}
