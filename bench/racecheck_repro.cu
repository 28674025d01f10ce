// A reproducer for compute-sanitizer racecheck's "Internal Sanitizer Error: Detected a failure
// to track a kernel launch" (docs/reliability.md, Sanitizers), written without um: N host
// threads each launch a kernel on their own stream and wait for it, as tests/gpu_stress.rs and
// examples/per_thread_streams.rs do through um.
//
// Built and run by scripts/racecheck-study.sh on the GPU machine (the bundle carries both):
//   nvcc -O2 -std=c++17 -arch=compute_75 -o racecheck_repro racecheck_repro.cu -lcuda
//   compute-sanitizer --tool racecheck ./racecheck_repro --threads 8 --stream per-thread ...
//
// Options (defaults in brackets):
//   --threads N          host threads launching at once [8]
//   --iters I            launch + wait rounds per thread [5]
//   --n ELEMS            floats per thread's buffer [4096]
//   --api driver|runtime driver: the PTX of --ptx loaded with cuModuleLoadData (JIT, as um
//                        does) and cuLaunchKernel; runtime: the same kernel compiled into this
//                        file, launched with <<<>>> [driver]
//   --ptx FILE           PTX holding `extern "C" kernel(float *x, int n)` (um's streams.ptx)
//   --stream owned|per-thread|legacy|per-iter
//                        a stream created per thread (cuStreamCreate), the per-thread default
//                        stream, the legacy NULL stream, or (driver) a non-blocking stream
//                        created and destroyed in every round, the memory attached to it each
//                        time, as a request of examples/async_requests.rs does through um
//                        (with_stream per request) [owned]
//   --wait sync|callback (driver) how a thread waits for its round: cuStreamSynchronize, or a
//                        stream callback (cuStreamAddCallback) that signals a condition
//                        variable, as um's sync_async does [sync]
//   --launches K         kernels per round [1]
//   --memory attach|global|device
//                        managed memory allocated host-attached then attached to the thread's
//                        stream (um's path; GLOBAL on the legacy stream, which refuses SINGLE),
//                        managed memory attached globally, or plain device memory [attach]
//   --module-per-thread  (driver) each thread loads its own module instead of sharing one
//
// Prints one line and exits 0 when every thread's result is right, 1 otherwise.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#define CK(call)                                                                         \
    do {                                                                                 \
        CUresult r_ = (call);                                                            \
        if (r_ != CUDA_SUCCESS) {                                                        \
            const char *name_ = "?";                                                     \
            cuGetErrorName(r_, &name_);                                                  \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, name_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define CR(call)                                                                              \
    do {                                                                                      \
        cudaError_t r_ = (call);                                                              \
        if (r_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorName(r_));                                                    \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

// The kernel of kernels-ptx/streams.cu, for --api runtime.
extern "C" __global__ void kernel(float *x, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        x[i] = sqrt(pow(3.14159, (double)i));
    }
}

struct Options {
    int threads = 8;
    int iters = 5;
    int n = 4096;
    std::string api = "driver";
    std::string ptx;
    std::string stream = "owned";
    std::string memory = "attach";
    std::string wait = "sync";
    int launches = 1;
    bool module_per_thread = false;
};

static Options opt;
static CUcontext ctx;
static std::string ptx_text;
static CUmodule shared_module;
static std::atomic<int> arrived{0};

static void usage() {
    fprintf(stderr, "see the header of racecheck_repro.cu for the options\n");
    exit(2);
}

static CUfunction load_kernel(CUmodule *module) {
    CK(cuModuleLoadData(module, ptx_text.c_str()));
    CUfunction f;
    CK(cuModuleGetFunction(&f, *module, "kernel"));
    return f;
}

// Whether x holds the kernel's result (checked on a few elements: element 0 is 1, element i
// is pi^(i/2) as float).
static bool right(const float *x) {
    for (int i : {0, 1, 2, 7}) {
        if (i >= opt.n) break;
        float want = (float)sqrt(pow(3.14159, (double)i));
        if (std::fabs(x[i] - want) > 1e-5f * std::fabs(want)) return false;
    }
    return true;
}

static void start_together() {
    arrived.fetch_add(1);
    while (arrived.load() < opt.threads) std::this_thread::yield();
}

// What a stream callback signals: the round's stream has run everything before it.
struct Signal {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    CUresult status = CUDA_SUCCESS;
};

static void CUDA_CB on_point(CUstream, CUresult status, void *data) {
    auto *sig = static_cast<Signal *>(data);
    std::lock_guard<std::mutex> g(sig->m);
    sig->status = status;
    sig->done = true;
    sig->cv.notify_one();
}

// Waits for everything enqueued on s so far, the way --wait says.
static void wait_for(CUstream s) {
    if (opt.wait == "sync") {
        CK(cuStreamSynchronize(s));
        return;
    }
    Signal sig;
    CK(cuStreamAddCallback(s, on_point, &sig, 0));
    std::unique_lock<std::mutex> g(sig.m);
    sig.cv.wait(g, [&] { return sig.done; });
    CK(sig.status);
}

static bool driver_thread() {
    CK(cuCtxSetCurrent(ctx));
    CUmodule own_module = nullptr;
    CUfunction f;
    if (opt.module_per_thread) {
        f = load_kernel(&own_module);
    } else {
        CK(cuModuleGetFunction(&f, shared_module, "kernel"));
    }
    CUstream s = nullptr;
    bool legacy = opt.stream == "legacy";
    bool per_iter = opt.stream == "per-iter";
    if (opt.stream == "owned") {
        CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    } else if (opt.stream == "per-thread") {
        s = CU_STREAM_PER_THREAD;
    } else if (legacy) {
        s = CU_STREAM_LEGACY;
    }
    size_t bytes = (size_t)opt.n * sizeof(float);
    CUdeviceptr x;
    bool device = opt.memory == "device";
    if (device) {
        CK(cuMemAlloc(&x, bytes));
    } else {
        CK(cuMemAllocManaged(&x, bytes,
                             opt.memory == "attach" ? CU_MEM_ATTACH_HOST : CU_MEM_ATTACH_GLOBAL));
        memset((void *)x, 0, bytes);
    }
    start_together();
    bool ok = true;
    std::vector<float> host(opt.n);
    for (int it = 0; it < opt.iters; it++) {
        if (per_iter) CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        if (opt.memory == "attach" && (it == 0 || per_iter)) {
            CK(cuStreamAttachMemAsync(s, x, 0, legacy ? CU_MEM_ATTACH_GLOBAL : CU_MEM_ATTACH_SINGLE));
        }
        int n = opt.n;
        void *args[] = {&x, &n};
        for (int k = 0; k < opt.launches; k++) {
            CK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, args, nullptr));
        }
        wait_for(s);
        if (per_iter) {
            // Back to the host before the stream goes, as um's scope does at its end.
            if (opt.memory == "attach") {
                CK(cuStreamAttachMemAsync(s, x, 0, CU_MEM_ATTACH_HOST));
                CK(cuStreamSynchronize(s));
            }
            CK(cuStreamDestroy(s));
            s = nullptr;
        }
        if (device) {
            CK(cuMemcpyDtoH(host.data(), x, bytes));
            ok &= right(host.data());
        } else {
            ok &= right((const float *)x);
            memset((void *)x, 0, bytes);
        }
    }
    CK(cuMemFree(x));
    if (opt.stream == "owned") CK(cuStreamDestroy(s));
    if (own_module) CK(cuModuleUnload(own_module));
    return ok;
}

static bool runtime_thread() {
    CR(cudaSetDevice(0));
    cudaStream_t s = nullptr;
    bool legacy = opt.stream == "legacy";
    if (opt.stream == "owned") {
        CR(cudaStreamCreate(&s));
    } else if (opt.stream == "per-thread") {
        s = cudaStreamPerThread;
    } else {
        s = cudaStreamLegacy;
    }
    size_t bytes = (size_t)opt.n * sizeof(float);
    float *x;
    bool device = opt.memory == "device";
    if (device) {
        CR(cudaMalloc(&x, bytes));
    } else {
        CR(cudaMallocManaged(&x, bytes,
                             opt.memory == "attach" ? cudaMemAttachHost : cudaMemAttachGlobal));
        memset(x, 0, bytes);
    }
    start_together();
    bool ok = true;
    std::vector<float> host(opt.n);
    for (int it = 0; it < opt.iters; it++) {
        if (opt.memory == "attach" && it == 0) {
            CR(cudaStreamAttachMemAsync(s, x, 0, legacy ? cudaMemAttachGlobal : cudaMemAttachSingle));
        }
        kernel<<<1, 64, 0, s>>>(x, opt.n);
        CR(cudaGetLastError());
        CR(cudaStreamSynchronize(s));
        if (device) {
            CR(cudaMemcpy(host.data(), x, bytes, cudaMemcpyDeviceToHost));
            ok &= right(host.data());
        } else {
            ok &= right(x);
            memset(x, 0, bytes);
        }
    }
    CR(cudaFree(x));
    if (opt.stream == "owned") CR(cudaStreamDestroy(s));
    return ok;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (a == "--threads") opt.threads = atoi(next().c_str());
        else if (a == "--iters") opt.iters = atoi(next().c_str());
        else if (a == "--n") opt.n = atoi(next().c_str());
        else if (a == "--api") opt.api = next();
        else if (a == "--ptx") opt.ptx = next();
        else if (a == "--stream") opt.stream = next();
        else if (a == "--memory") opt.memory = next();
        else if (a == "--wait") opt.wait = next();
        else if (a == "--launches") opt.launches = atoi(next().c_str());
        else if (a == "--module-per-thread") opt.module_per_thread = true;
        else usage();
    }
    if (opt.threads < 1 || opt.iters < 1 || opt.n < 1 || opt.launches < 1) usage();
    if (opt.api != "driver" && opt.api != "runtime") usage();
    if (opt.stream != "owned" && opt.stream != "per-thread" && opt.stream != "legacy" &&
        opt.stream != "per-iter")
        usage();
    if (opt.wait != "sync" && opt.wait != "callback") usage();
    // Rounds on their own streams and callback waits are the driver path's (um's) only.
    if (opt.api == "runtime" && (opt.stream == "per-iter" || opt.wait != "sync")) usage();
    if (opt.memory != "attach" && opt.memory != "global" && opt.memory != "device") usage();

    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    if (opt.api == "driver") {
        if (opt.ptx.empty()) usage();
        std::ifstream in(opt.ptx);
        if (!in) {
            fprintf(stderr, "cannot read %s\n", opt.ptx.c_str());
            return 2;
        }
        std::stringstream ss;
        ss << in.rdbuf();
        ptx_text = ss.str();
        if (!opt.module_per_thread) load_kernel(&shared_module);
    }

    std::vector<std::thread> workers;
    std::vector<char> results(opt.threads, 0);
    for (int t = 0; t < opt.threads; t++) {
        workers.emplace_back([t, &results] {
            results[t] = opt.api == "driver" ? driver_thread() : runtime_thread();
        });
    }
    for (auto &w : workers) w.join();
    int right_count = 0;
    for (char r : results) right_count += r;
    if (shared_module) CK(cuModuleUnload(shared_module));
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("repro: api=%s stream=%s memory=%s threads=%d iters=%d n=%d%s: %d/%d right\n",
           opt.api.c_str(), opt.stream.c_str(), opt.memory.c_str(), opt.threads, opt.iters, opt.n,
           opt.module_per_thread ? " module-per-thread" : "", right_count, opt.threads);
    return right_count == opt.threads ? 0 : 1;
}
