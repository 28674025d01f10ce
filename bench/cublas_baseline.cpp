// The CUDA C++ side of um's cuBLAS benchmark (benches/um_bench/cublas.rs): cublasSgemm /
// cublasDgemm on device memory from cuMemAlloc, on one stream, timed as the Rust side times
// um-cublas (host clock around ITERS calls and a cuStreamSynchronize, per call). Compiled on
// the GPU machine by the bundle's bench.sh:
//   nvcc -O3 -o um_cublas_baseline cublas_baseline.cpp -lcublas -lcuda
//
//   um_cublas_baseline gemm DTYPE M N K ITERS SAMPLES     DTYPE: f32 | f64
//
// Prints one JSON object: the median and minimum over SAMPLES of the time per call, in µs, and
// "libs": the cuBLAS files this process mapped (from /proc/self/maps; the Rust side prints the
// same for its own process), to show whether both ran the same libcublas and libcublasLt.
#include <cublas_v2.h>
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(call)                                                                    \
    do {                                                                            \
        CUresult r_ = (call);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                   \
            const char *name_ = "?";                                                \
            cuGetErrorName(r_, &name_);                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, name_); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#define CB(call)                                                                    \
    do {                                                                            \
        cublasStatus_t s_ = (call);                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                          \
            fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #call, (int)s_); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static double now_us() {
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// The paths of the mapped files whose name holds "libcublas", sorted, joined with ';'.
static std::string cublas_files() {
    std::ifstream maps("/proc/self/maps");
    std::set<std::string> files;
    std::string line;
    while (std::getline(maps, line)) {
        size_t slash = line.find('/');
        if (slash != std::string::npos && line.find("libcublas", slash) != std::string::npos)
            files.insert(line.substr(slash));
    }
    std::string out;
    for (const std::string &f : files) out += (out.empty() ? "" : ";") + f;
    return out;
}

// The values the Rust side fills its matrices with (benches/um_bench/cublas.rs, `value`).
static double value(size_t i) { return (double)((i * 7 + 3) % 11) * 0.125 - 0.625; }

template <typename T>
static CUdeviceptr upload(size_t n) {
    std::vector<T> host(n);
    for (size_t i = 0; i < n; i++) host[i] = (T)value(i);
    CUdeviceptr p;
    CK(cuMemAlloc(&p, n * sizeof(T)));
    CK(cuMemcpyHtoD(p, host.data(), n * sizeof(T)));
    return p;
}

static cublasStatus_t gemm(cublasHandle_t h, int m, int n, int k, const float *a, const float *b,
                           float *c) {
    const float one = 1.0f, zero = 0.0f;
    return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k, &zero, c, m);
}

static cublasStatus_t gemm(cublasHandle_t h, int m, int n, int k, const double *a,
                           const double *b, double *c) {
    const double one = 1.0, zero = 0.0;
    return cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k, &zero, c, m);
}

template <typename T>
static int run(const char *dtype, int m, int n, int k, int iters, int samples) {
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CUdeviceptr a = upload<T>((size_t)m * k), b = upload<T>((size_t)k * n);
    CUdeviceptr c;
    CK(cuMemAlloc(&c, (size_t)m * n * sizeof(T)));
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasSetStream(h, (cudaStream_t)s));
    T *pa = (T *)a, *pb = (T *)b, *pc = (T *)c;
    for (int i = 0; i < 2; i++) CB(gemm(h, m, n, k, pa, pb, pc));
    CK(cuStreamSynchronize(s));
    std::vector<double> per_call, enqueue;
    for (int t = 0; t < samples; t++) {
        double t0 = now_us();
        for (int i = 0; i < iters; i++) CB(gemm(h, m, n, k, pa, pb, pc));
        double t1 = now_us();
        CK(cuStreamSynchronize(s));
        per_call.push_back((now_us() - t0) / iters);
        enqueue.push_back((t1 - t0) / iters);
    }
    std::sort(per_call.begin(), per_call.end());
    std::sort(enqueue.begin(), enqueue.end());
    // enqueue_us: the host's time per call until the last call returned, before the synchronize
    // (near median_us where the host paces the stream).
    printf("{\"scenario\":\"cublas\",\"impl\":\"cpp\",\"dtype\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,"
           "\"iters\":%d,\"median_us\":%.4f,\"min_us\":%.4f,\"enqueue_us\":%.4f,\"libs\":\"%s\"}\n",
           dtype, m, n, k, iters, per_call[per_call.size() / 2], per_call[0],
           enqueue[enqueue.size() / 2], cublas_files().c_str());
    CB(cublasDestroy(h));
    CK(cuMemFree(a));
    CK(cuMemFree(b));
    CK(cuMemFree(c));
    CK(cuStreamDestroy(s));
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 8 || strcmp(argv[1], "gemm") != 0) {
        fprintf(stderr, "usage: %s gemm f32|f64 M N K ITERS SAMPLES\n", argv[0]);
        return 2;
    }
    int m = atoi(argv[3]), n = atoi(argv[4]), k = atoi(argv[5]);
    int iters = atoi(argv[6]), samples = atoi(argv[7]);
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    std::string dtype = argv[2];
    int rc = dtype == "f64" ? run<double>("f64", m, n, k, iters, samples)
                            : run<float>("f32", m, n, k, iters, samples);
    CK(cuDevicePrimaryCtxRelease(dev));
    return rc;
}
