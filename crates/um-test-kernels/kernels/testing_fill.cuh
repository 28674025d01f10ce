// The definition of `fill`, whose prototype is in testing.cu. Its parameter
// names differ from the prototype's on purpose: only the types at each position matter.
#pragma once
#include "um.cuh"

UM_SAFE_KERNEL void fill(float *out, unsigned int fill_value, um::len32 count) {
    for (auto i : um::indices(count)) {
        out[i] = (float)fill_value;
    }
}
