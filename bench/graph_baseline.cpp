// The CUDA C++ side of um's graph benchmark (docs/performance.md, section 8): the same work as
// benches/um_bench/graphs.rs, written straight against the driver API, launching the same PTX
// (written out by the Rust side). Compiled on the GPU machine by the bundle's bench.sh:
//   nvcc -O3 -cudart none -o graph_baseline graph_baseline.cpp -lcuda
//
//   graph_baseline graphs PTX_DIR
//
// Prints one JSON object: host µs of 20 add_scalar launches one by one and of one replay of the
// same 20 launches captured as a graph (median and minimum of 2000 samples, a stream
// synchronize between samples, untimed), and µs per batch of the two-stage pipeline (10 µs
// stages, 400 batches of 1024 floats), eager (an event per batch from stream A to stream B) and
// as one graph of all batches replayed 5 times. Device memory, no managed memory: the process
// attaches nothing, as um's child process attaches nothing.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

static double now_us() {
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

static const int REPS = 2000, KERNELS = 20, BATCHES = 400, REPLAYS = 5;
static const unsigned LEN = 1024, BLOCKS = 4, THREADS = 256;
static const unsigned long long STAGE_NS = 10000;

static CUfunction add_scalar, spin_then_add;

static void add(CUstream s, CUdeviceptr p, float v) {
    unsigned n = LEN;
    void *args[] = {&p, &v, &n};
    CK(cuLaunchKernel(add_scalar, BLOCKS, 1, 1, THREADS, 1, 1, 0, s, args, nullptr));
}

static void spin(CUstream s, CUdeviceptr p, float v) {
    unsigned n = LEN;
    unsigned long long ns = STAGE_NS;
    void *args[] = {&p, &v, &ns, &n};
    CK(cuLaunchKernel(spin_then_add, BLOCKS, 1, 1, THREADS, 1, 1, 0, s, args, nullptr));
}

static void stats(std::vector<double> v, double *median, double *min) {
    std::sort(v.begin(), v.end());
    *median = v[v.size() / 2];
    *min = v[0];
}

int main(int argc, char **argv) {
    if (argc < 3 || std::string(argv[1]) != "graphs") {
        fprintf(stderr, "usage: graph_baseline graphs PTX_DIR\n");
        return 2;
    }
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    std::ifstream in(std::string(argv[2]) + "/testing.ptx");
    if (!in) { fprintf(stderr, "cannot read %s/testing.ptx\n", argv[2]); return 1; }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string ptx = ss.str();
    CUmodule mod;
    CK(cuModuleLoadData(&mod, ptx.c_str()));
    CK(cuModuleGetFunction(&add_scalar, mod, "add_scalar"));
    CK(cuModuleGetFunction(&spin_then_add, mod, "spin_then_add"));

    // 20 kernels: one by one, and one replay.
    CUstream s, cap;
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CK(cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x, y;
    CK(cuMemAlloc(&x, LEN * 4));
    CK(cuMemAlloc(&y, LEN * 4));
    CK(cuMemsetD32(x, 0, LEN));
    CK(cuMemsetD32(y, 0, LEN));
    std::vector<double> eager, replay;
    for (int i = 0; i < REPS + 10; i++) {
        double t0 = now_us();
        for (int k = 0; k < KERNELS; k++) add(s, x, 1.0f);
        double dt = now_us() - t0;
        CK(cuStreamSynchronize(s));
        if (i >= 10) eager.push_back(dt);
    }
    CK(cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int k = 0; k < KERNELS; k++) add(cap, y, 1.0f);
    CUgraph g20;
    CK(cuStreamEndCapture(cap, &g20));
    CUgraphExec e20;
    CK(cuGraphInstantiate(&e20, g20, 0));
    CK(cuGraphUpload(e20, s));
    for (int i = 0; i < REPS + 10; i++) {
        double t0 = now_us();
        CK(cuGraphLaunch(e20, s));
        double dt = now_us() - t0;
        CK(cuStreamSynchronize(s));
        if (i >= 10) replay.push_back(dt);
    }
    std::vector<float> hx(LEN), hy(LEN);
    CK(cuMemcpyDtoH(hx.data(), x, LEN * 4));
    CK(cuMemcpyDtoH(hy.data(), y, LEN * 4));
    float want = (float)(KERNELS * (REPS + 10));
    for (unsigned i = 0; i < LEN; i++) {
        if (hx[i] != want || hy[i] != want) { fprintf(stderr, "20 kernels: wrong result\n"); return 1; }
    }

    // The pipeline.
    CUstream a, b;
    CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CUevent ea, eb;
    CK(cuEventCreate(&ea, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&eb, CU_EVENT_DISABLE_TIMING));
    std::vector<CUdeviceptr> batch(BATCHES);
    std::vector<float> init(LEN);
    auto reset = [&] {
        for (int k = 0; k < BATCHES; k++) {
            for (unsigned j = 0; j < LEN; j++) init[j] = (float)(k + j);
            CK(cuMemcpyHtoD(batch[k], init.data(), LEN * 4));
        }
    };
    auto check = [&](float add) {
        for (int k = 0; k < BATCHES; k++) {
            CK(cuMemcpyDtoH(init.data(), batch[k], LEN * 4));
            for (unsigned j = 0; j < LEN; j++) {
                if (init[j] != (float)(k + j) + add) { fprintf(stderr, "pipeline: wrong result\n"); exit(1); }
            }
        }
    };
    for (int k = 0; k < BATCHES; k++) CK(cuMemAlloc(&batch[k], LEN * 4));
    reset();
    // Eager: A's stage, an event, B waits, B's stage; one wait at the end.
    double t0 = now_us();
    for (int k = 0; k < BATCHES; k++) {
        spin(a, batch[k], 1.0f);
        CK(cuEventRecord(ea, a));
        CK(cuStreamWaitEvent(b, ea, 0));
        spin(b, batch[k], 2.0f);
    }
    CK(cuStreamSynchronize(b));
    double eager_us = (now_us() - t0) / BATCHES;
    check(3.0f);
    // The graph: the same loop captured on A and B (a fork per batch, one join at the end).
    reset();
    CK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int k = 0; k < BATCHES; k++) {
        spin(a, batch[k], 1.0f);
        CK(cuEventRecord(ea, a));
        CK(cuStreamWaitEvent(b, ea, 0));
        spin(b, batch[k], 2.0f);
    }
    CK(cuEventRecord(eb, b));
    CK(cuStreamWaitEvent(a, eb, 0));
    CUgraph gp;
    CK(cuStreamEndCapture(a, &gp));
    CUgraphExec ep;
    CK(cuGraphInstantiate(&ep, gp, 0));
    CK(cuGraphLaunch(ep, s)); // warm-up
    CK(cuStreamSynchronize(s));
    t0 = now_us();
    for (int r = 0; r < REPLAYS; r++) CK(cuGraphLaunch(ep, s));
    CK(cuStreamSynchronize(s));
    double graph_us = (now_us() - t0) / (BATCHES * REPLAYS);
    check(3.0f * (REPLAYS + 1));

    double em, emin, rm, rmin;
    stats(eager, &em, &emin);
    stats(replay, &rm, &rmin);
    printf("{\"launch20_median\":%.4f,\"launch20_min\":%.4f,\"replay20_median\":%.4f,\"replay20_min\":%.4f,"
           "\"pipeline_eager_us\":%.4f,\"pipeline_graph_us\":%.4f}\n",
           em, emin, rm, rmin, eager_us, graph_us);
    return 0;
}
