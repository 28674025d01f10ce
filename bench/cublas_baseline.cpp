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
//
// Built with -DUM_BASELINE_SHARED -shared -Xcompiler -fPIC (bench.sh: libum_cublas_baseline.so)
// it has no main and exports um_cpp_gemm_open / _batch / _close (and _parts / _batch_on for
// the probe), which um_bench loads to take turns with its own calls in one process
// (benches/um_bench/cpp_lib.rs).
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

// One GEMM measurement's state, on the current context: its own stream, handle and
// cuMemAlloc buffers.
struct GemmBench {
    CUstream s;
    CUdeviceptr a, b, c;
    cublasHandle_t h;
    int m, n, k;
    bool f64;
};

template <typename T>
static int batch_of(GemmBench *g, int iters, double *per_call_us, double *enqueue_us) {
    T *pa = (T *)g->a, *pb = (T *)g->b, *pc = (T *)g->c;
    double t0 = now_us();
    for (int i = 0; i < iters; i++) CB(gemm(g->h, g->m, g->n, g->k, pa, pb, pc));
    double t1 = now_us();
    CK(cuStreamSynchronize(g->s));
    *per_call_us = (now_us() - t0) / iters;
    *enqueue_us = (t1 - t0) / iters;
    return 0;
}

// The C ABI that um_bench calls in its own process (bench.sh builds this file a second time,
// with -DUM_BASELINE_SHARED, as libum_cublas_baseline.so): the same measurement as `run`
// below, batch by batch, so that the Rust side takes turns with it in one process. Errors are
// printed and end the process, as in the program.
extern "C" {
// A measurement of `c = a b` (f64 if `f64`, else f32) on the context current on this thread,
// after two untimed calls.
GemmBench *um_cpp_gemm_open(int f64, int m, int n, int k) {
    GemmBench *g = new GemmBench{};
    g->m = m;
    g->n = n;
    g->k = k;
    g->f64 = f64 != 0;
    size_t elem = f64 ? sizeof(double) : sizeof(float);
    CK(cuStreamCreate(&g->s, CU_STREAM_DEFAULT));
    if (f64) {
        g->a = upload<double>((size_t)m * k);
        g->b = upload<double>((size_t)k * n);
    } else {
        g->a = upload<float>((size_t)m * k);
        g->b = upload<float>((size_t)k * n);
    }
    CK(cuMemAlloc(&g->c, (size_t)m * n * elem));
    CB(cublasCreate(&g->h));
    CB(cublasSetStream(g->h, (cudaStream_t)g->s));
    double per_call, enqueue;
    if (f64)
        batch_of<double>(g, 2, &per_call, &enqueue);
    else
        batch_of<float>(g, 2, &per_call, &enqueue);
    return g;
}

// `iters` calls, timed: µs per call until the stream is drained, and until the last call
// returned (before the synchronize).
int um_cpp_gemm_batch(GemmBench *g, int iters, double *per_call_us, double *enqueue_us) {
    return g->f64 ? batch_of<double>(g, iters, per_call_us, enqueue_us)
                  : batch_of<float>(g, iters, per_call_us, enqueue_us);
}

// The stream and buffers of a measurement, for a caller that runs its own calls on them.
void um_cpp_gemm_parts(GemmBench *g, CUstream *s, CUdeviceptr *a, CUdeviceptr *b, CUdeviceptr *c) {
    *s = g->s;
    *a = g->a;
    *b = g->b;
    *c = g->c;
}

// As um_cpp_gemm_batch, with this measurement's handle on another stream and buffers (of the
// same shape and type, on the same context; the stream idle): the handle is bound to `s` for
// the batch, then back to its own.
int um_cpp_gemm_batch_on(GemmBench *g, CUstream s, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                         int iters, double *per_call_us, double *enqueue_us) {
    GemmBench other = *g;
    other.s = s;
    other.a = a;
    other.b = b;
    other.c = c;
    CB(cublasSetStream(g->h, (cudaStream_t)s));
    int rc = um_cpp_gemm_batch(&other, iters, per_call_us, enqueue_us);
    CB(cublasSetStream(g->h, (cudaStream_t)g->s));
    return rc;
}

void um_cpp_gemm_close(GemmBench *g) {
    CB(cublasDestroy(g->h));
    CK(cuMemFree(g->a));
    CK(cuMemFree(g->b));
    CK(cuMemFree(g->c));
    CK(cuStreamDestroy(g->s));
    delete g;
}
}

#ifndef UM_BASELINE_SHARED
template <typename T>
static int run(const char *dtype, int m, int n, int k, int iters, int samples) {
    GemmBench *g = um_cpp_gemm_open(sizeof(T) == sizeof(double), m, n, k);
    std::vector<double> per_call, enqueue;
    for (int t = 0; t < samples; t++) {
        double p, e;
        um_cpp_gemm_batch(g, iters, &p, &e);
        per_call.push_back(p);
        enqueue.push_back(e);
    }
    std::sort(per_call.begin(), per_call.end());
    std::sort(enqueue.begin(), enqueue.end());
    // enqueue_us: the host's time per call until the last call returned, before the synchronize
    // (near median_us where the host paces the stream).
    printf("{\"scenario\":\"cublas\",\"impl\":\"cpp\",\"dtype\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,"
           "\"iters\":%d,\"median_us\":%.4f,\"min_us\":%.4f,\"enqueue_us\":%.4f,\"libs\":\"%s\"}\n",
           dtype, m, n, k, iters, per_call[per_call.size() / 2], per_call[0],
           enqueue[enqueue.size() / 2], cublas_files().c_str());
    um_cpp_gemm_close(g);
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
#endif
