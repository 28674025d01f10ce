// The elementwise half of an MLP layer (examples/mlp_layer.rs): cuBLAS computes Y = W X, this
// adds the bias and applies ReLU.
#include "um.cuh"

// y[i] = max(y[i] + bias[i % rows], 0) for every i below y's length: Y is a column-major
// activation of `rows` features per sample (one column per sample), so element i belongs to
// feature i % rows. Each thread writes its own elements of y (um::indices); bias is only read,
// at an index below its own length. um allocates no empty buffer, so rows > 0; the kernel
// checks it anyway, so that no launch can divide by zero.
UM_SAFE_KERNEL void bias_relu(float *y, um::len32 n, const float *bias, um::len32 rows) {
    unsigned long long features = rows;
    if (features == 0) {
        return;
    }
    for (auto i : um::indices(n)) {
        float v = y[i] + bias[i % features];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}
