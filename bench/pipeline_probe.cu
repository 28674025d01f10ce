// Where a two-stage pipeline on managed memory loses its time (docs/performance.md, section 7), in CUDA C++ without um.
// Built and run on the GPU machine by the bundle's bench/pipeline_probe.sh:
//
//   nvcc -O2 -o pipeline_probe pipeline_probe.cu && ./pipeline_probe BATCHES STAGE_US [VARIANTS]
//
// VARIANTS, a comma-separated list, picks the variants and their order (default: all, in the
// order below).
//
// Every variant runs the same pipeline: batch k (1024 floats) is processed by a kernel of
// STAGE_US microseconds on stream A, then by the same kernel on stream B, and comes back to the
// host at the end. "events": the host enqueues everything (B waits for A through an event) and
// waits once at the end. "sync": the host waits for A after each batch, then enqueues B.
// Variants differ only in the memory and in the calls made per batch:
//
//   device        cudaMalloc memory, no attach at all (the ideal pipeline)
//   global        managed, attached globally, written by the host before the clock
//   attach_ab     managed, attached to the host, written by the host; per batch: attach to A,
//                 kernel A, [event], attach to B, kernel B  (what um's hand_off does)
//   attach_a      as attach_ab without the attach to B (breaks the association contract:
//                 measured only to see what the second attach costs)
//   resident_ab   as attach_ab, but every batch was moved to the GPU before the clock (no page
//                 faults in the loop), so only the attaches differ from `device`
//   prefetch_ab   as attach_ab plus a prefetch to the GPU on A after the attach (um's
//                 Transfer::Prefetch)
//
// For each it prints one JSON line: wall-clock us per batch (and of it, the host's enqueue
// time per batch, before the final wait), and from %globaltimer stamps the
// mean stage length and the mean idle time on A between consecutive stages.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(call)                                                                      \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,             \
                    cudaGetErrorString(e_));                                          \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static const int N = 1024;

__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spins for `ns`, then adds `v` to every element; block 0 thread 0 stamps entry and exit.
__global__ void spin_add(float *x, float v, unsigned long long ns, unsigned long long *stamp) {
    unsigned long long t0 = gtimer();
    if (blockIdx.x == 0 && threadIdx.x == 0) stamp[0] = t0;
    while (gtimer() - t0 < ns) {
    }
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) x[i] += v;
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x == 0) stamp[1] = gtimer();
}

static double now_us() {
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

struct Result {
    double enqueue_us, us_per_batch, stage_us, idle_a_us, idle_b_us;
    bool correct;
};

static Result run(const std::string &variant, bool events, int batches, unsigned long long ns) {
    bool managed = variant != "device";
    bool attach = variant == "attach_ab" || variant == "attach_a" || variant == "resident_ab" ||
                  variant == "prefetch_ab";
    bool attach_b = attach && variant != "attach_a";
    bool prefetch = variant == "prefetch_ab";
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    int dev;
    CK(cudaGetDevice(&dev));
    std::vector<float *> x(batches);
    for (int k = 0; k < batches; k++) {
        if (!managed) {
            CK(cudaMalloc(&x[k], N * sizeof(float)));
            std::vector<float> h(N);
            for (int j = 0; j < N; j++) h[j] = (float)(k + j);
            CK(cudaMemcpy(x[k], h.data(), N * sizeof(float), cudaMemcpyHostToDevice));
        } else {
            CK(cudaMallocManaged(&x[k], N * sizeof(float),
                                 variant == "global" ? cudaMemAttachGlobal : cudaMemAttachHost));
            for (int j = 0; j < N; j++) x[k][j] = (float)(k + j);
        }
    }
    if (variant == "resident_ab" || variant == "global") {
        cudaMemLocation loc;
        loc.type = cudaMemLocationTypeDevice;
        loc.id = dev;
        for (int k = 0; k < batches; k++) {
            if (variant == "resident_ab") CK(cudaStreamAttachMemAsync(a, x[k], 0, cudaMemAttachSingle));
            CK(cudaMemPrefetchAsync(x[k], N * sizeof(float), loc, 0, a));
        }
        CK(cudaStreamSynchronize(a));
    }
    unsigned long long *stamps;  // device memory: [k][stage][start,end]
    CK(cudaMalloc(&stamps, (size_t)batches * 4 * sizeof(unsigned long long)));
    CK(cudaDeviceSynchronize());
    double t0 = now_us();
    for (int k = 0; k < batches; k++) {
        if (attach) CK(cudaStreamAttachMemAsync(a, x[k], 0, cudaMemAttachSingle));
        if (prefetch) {
            cudaMemLocation loc;
            loc.type = cudaMemLocationTypeDevice;
            loc.id = dev;
            CK(cudaMemPrefetchAsync(x[k], N * sizeof(float), loc, 0, a));
        }
        spin_add<<<4, 256, 0, a>>>(x[k], 1.0f, ns, stamps + 4 * k);
        CK(cudaGetLastError());
        if (events) {
            CK(cudaEventRecord(ev, a));
            CK(cudaStreamWaitEvent(b, ev, 0));
        } else {
            CK(cudaStreamSynchronize(a));
        }
        if (attach_b) CK(cudaStreamAttachMemAsync(b, x[k], 0, cudaMemAttachSingle));
        spin_add<<<4, 256, 0, b>>>(x[k], 2.0f, ns, stamps + 4 * k + 2);
        CK(cudaGetLastError());
    }
    double enqueue_us = (now_us() - t0) / batches;
    CK(cudaStreamSynchronize(b));
    CK(cudaStreamSynchronize(a));
    double us = (now_us() - t0) / batches;
    std::vector<unsigned long long> st((size_t)batches * 4);
    CK(cudaMemcpy(st.data(), stamps, st.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    double stage = 0, idle_a = 0, idle_b = 0;
    for (int k = 0; k < batches; k++) {
        stage += (st[4 * k + 1] - st[4 * k]) / 1e3;
        if (k > 0) idle_a += ((double)st[4 * k] - (double)st[4 * (k - 1) + 1]) / 1e3;
        if (k > 0) idle_b += ((double)st[4 * k + 2] - (double)st[4 * (k - 1) + 3]) / 1e3;
    }
    bool correct = true;
    for (int k = 0; k < batches; k++) {
        std::vector<float> h(N);
        CK(cudaMemcpy(h.data(), x[k], N * sizeof(float), cudaMemcpyDefault));
        for (int j = 0; j < N; j++) correct = correct && h[j] == (float)(k + j) + 3.0f;
        CK(cudaFree(x[k]));
    }
    CK(cudaFree(stamps));
    CK(cudaEventDestroy(ev));
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    return {enqueue_us, us, stage / batches, idle_a / (batches - 1), idle_b / (batches - 1), correct};
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s BATCHES STAGE_US [VARIANT,VARIANT,...]\n", argv[0]);
        return 2;
    }
    int batches = atoi(argv[1]);
    unsigned long long ns = (unsigned long long)(atof(argv[2]) * 1000.0);
    CK(cudaFree(0));
    int cma = 0;
    CK(cudaDeviceGetAttribute(&cma, cudaDevAttrConcurrentManagedAccess, 0));
    std::vector<std::string> variants = {"device", "global", "attach_ab", "attach_a", "resident_ab", "prefetch_ab"};
    if (argc == 4) {
        variants.clear();
        std::string list = argv[3];
        size_t at = 0;
        while (at <= list.size()) {
            size_t comma = list.find(',', at);
            if (comma == std::string::npos) comma = list.size();
            variants.push_back(list.substr(at, comma - at));
            at = comma + 1;
        }
    }
    run("device", true, 20, ns);  // warm-up
    for (int round = 0; round < 2; round++)
        for (const std::string &v : variants)
            for (int e = 1; e >= 0; e--) {
                Result r = run(v, e == 1, batches, ns);
                printf("{\"round\":%d,\"variant\":\"%s\",\"mode\":\"%s\",\"stage_us_set\":%.1f,"
                       "\"enqueue_us\":%.2f,\"us_per_batch\":%.2f,\"stage_us\":%.2f,\"idle_a_us\":%.2f,"
                       "\"idle_b_us\":%.2f,\"correct\":%s,\"concurrent_managed_access\":%d}\n",
                       round, v.c_str(), e ? "events" : "sync", ns / 1e3, r.enqueue_us, r.us_per_batch, r.stage_us,
                       r.idle_a_us, r.idle_b_us, r.correct ? "true" : "false", cma);
                fflush(stdout);
            }
    return 0;
}
