// y = a * x + y, the classic.
#include "um.cuh"

UM_SAFE_KERNEL void saxpy(const float *x, float *y, float a, um::len32 n) {
    for (auto i : um::indices(n)) {
        y[i] = a * x[i] + y[i];
    }
}
