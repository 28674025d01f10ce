// A histogram: `values` (n elements) into `counts` (counts_len bins), with the binning passed
// by value as a struct. Buffers of different lengths, each with its own length after it.
#include "um.cuh"

struct Binning {
    float lo;     // the lower edge of bin 0
    float width;  // the width of every bin
    unsigned int bins;  // bins in use (at most counts_len are ever touched)
};

UM_SAFE_KERNEL void histogram(const float *values, um::len32 n, unsigned int *counts,
                              um::len32 counts_len, Binning b) {
    // The contract holds for every value of `b`: a bin index is used only below both `b.bins`
    // and `counts_len`, and the float-to-integer conversion happens only for values in range
    // (NaN and infinities fail both comparisons).
    const float limit = (float)min(b.bins, counts_len);
    for (auto i : um::indices(n)) {
        float t = (values[i] - b.lo) / b.width;
        if (t >= 0.0f && t < limit) {
            unsigned int bin = (unsigned int)t;
            if (bin < counts_len) {
                atomicAdd(&counts[bin], 1u);
            }
        }
    }
}
