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
#include <string>

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

int main(int argc, char **argv) {
    // --global: the plain pattern (allocated attached globally, no stream attach, no prefetch).
    // Default: um's pattern for a buffer handed from a stream of device 0 to one of device 1
    // (tests/gpu_two_devices.rs): allocated attached to the host, attached singly to device 0's
    // stream, a kernel there, then device 1's stream waits for it, the buffer is attached singly
    // to that stream and prefetched to device 1, and device 1's kernel reads it.
    bool global = argc > 1 && std::string(argv[1]) == "--global";
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (count < 2) {
        fprintf(stderr, "needs two GPUs, found %d\n", count);
        return 2;
    }
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(float);
    float *x = nullptr, *y = nullptr;
    cudaStream_t s0 = nullptr, s1 = nullptr;
    cudaEvent_t e0 = nullptr;
    CK(cudaSetDevice(0));
    CK(cudaMallocManaged(&x, bytes, global ? cudaMemAttachGlobal : cudaMemAttachHost));
    for (int i = 0; i < n; ++i) x[i] = float(i);
    CK(cudaStreamCreate(&s0));
    CK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
    if (!global) CK(cudaStreamAttachMemAsync(s0, x, 0, cudaMemAttachSingle));
    CK(cudaEventRecord(e0, s0));
    CK(cudaSetDevice(1));
    CK(cudaStreamCreate(&s1));
    CK(cudaMallocManaged(&y, bytes, global ? cudaMemAttachGlobal : cudaMemAttachHost));
    CK(cudaStreamWaitEvent(s1, e0, 0));
    if (!global) {
        CK(cudaStreamAttachMemAsync(s1, x, 0, cudaMemAttachSingle));
        CK(cudaStreamAttachMemAsync(s1, y, 0, cudaMemAttachSingle));
        cudaMemLocation loc = {};
        loc.type = cudaMemLocationTypeDevice;
        loc.id = 1;
        CK(cudaMemPrefetchAsync(x, bytes, loc, 0, s1));
    }
    add_one<<<(n + 255) / 256, 256, 0, s1>>>(x, y, n);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s1));
    if (!global) CK(cudaStreamAttachMemAsync(s1, y, 0, cudaMemAttachHost));
    CK(cudaStreamSynchronize(s1));
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += y[i] != float(i) + 1.0f;
    printf("device 1 read device 0's managed memory: %d of %d values wrong\n", bad, n);
    CK(cudaFree(y));
    CK(cudaStreamDestroy(s1));
    CK(cudaSetDevice(0));
    CK(cudaFree(x));
    CK(cudaEventDestroy(e0));
    CK(cudaStreamDestroy(s0));
    return bad != 0;
}
