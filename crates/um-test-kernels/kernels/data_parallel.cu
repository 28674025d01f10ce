// The gradient step of examples/data_parallel.rs: a model with one weight per feature predicts
// y = w * x (element by element), and the loss over this rank's shard is
// 1/2 * sum over samples i and features j of (w[j] x[i][j] - y[i][j])^2. Its gradient is
// grad[j] = sum over i of (w[j] x[i][j] - y[i][j]) * x[i][j].
#include "um.cuh"

// x and y hold `samples_len` values each: rows of `d` features (a partial last row is ignored).
// One thread per feature j writes grad[j] alone; every read is below its buffer's length
// (row * d + j < rows * d <= samples_len, j < d).
UM_SAFE_KERNEL void dp_gradient(const float *x, const float *y, um::len32 samples_len,
                                const float *w, float *grad, um::len32 d) {
    const unsigned long long features = static_cast<unsigned int>(d);
    const unsigned long long values = static_cast<unsigned int>(samples_len);
    const unsigned long long rows = features == 0 ? 0 : values / features;
    for (auto j : um::indices(features)) {
        float acc = 0.0f;
        for (unsigned long long row = 0; row < rows; ++row) {
            const unsigned long long at = row * features + j;
            const float e = w[j] * x[at] - y[at];
            acc += e * x[at];
        }
        grad[j] = acc;
    }
}
