// The C++ reproducer of memcheck's cross-device report (docs/reliability.md), no um: managed
// memory allocated with device 0's context current (cuMemAllocManaged, attached globally), read
// by a kernel of device 1. The values are right (checked below), yet memcheck reports every
// read as out of bounds: it knows the allocation only in the context that made it. um's tests
// that hand memory of one device to a stream of the other (tests/gpu_two_devices.rs) and
// pipeline's two-GPU part do exactly this, and run.sh excludes them from memcheck and initcheck
// with this program's report beside them.
//
//   nvcc -O2 -std=c++17 -o memcheck_cross_device bench/memcheck_cross_device.cu -lcuda
//   compute-sanitizer --tool memcheck ./memcheck_cross_device
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>

__global__ void add_one(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main() {
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (count < 2) {
        fprintf(stderr, "needs two GPUs, found %d\n", count);
        return 2;
    }
    const int n = 1 << 10;
    float *x = nullptr, *y = nullptr;
    CK(cudaSetDevice(0));
    CK(cudaMallocManaged(&x, n * sizeof(float), cudaMemAttachGlobal));
    for (int i = 0; i < n; ++i) x[i] = float(i);
    CK(cudaSetDevice(1));
    CK(cudaMallocManaged(&y, n * sizeof(float), cudaMemAttachGlobal));
    add_one<<<(n + 255) / 256, 256>>>(x, y, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += y[i] != float(i) + 1.0f;
    printf("device 1 read device 0's managed memory: %d of %d values wrong\n", bad, n);
    CK(cudaFree(y));
    CK(cudaSetDevice(0));
    CK(cudaFree(x));
    return bad != 0;
}
