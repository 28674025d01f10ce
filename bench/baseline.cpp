// The CUDA C++ side of um's benchmarks: the same work as benches/um_bench.rs, written straight
// against the driver API, launching the same PTX (written out by the Rust side). Compiled on the
// GPU machine by the bundle's bench.sh: nvcc -O3 -cudart none -o um_baseline baseline.cpp -lcuda
// (-O3 for the host code, as Rust's release profile uses opt-level 3; the kernels are um's PTX)
//
//   um_baseline launch      PTX_DIR BATCHES PER_BATCH
//   um_baseline run_task    PTX_DIR MODE MIB ITERS
//                           MODE: naive | attach | prefetch | host_resident | explicit
//   um_baseline transitions PTX_DIR REPS
//   um_baseline bandwidth   PTX_DIR MIB                 how fast bytes move, by each mechanism
//   um_baseline threads     PTX_DIR MIB THREADS ITERS   run_task with explicit copies, one
//                                                       stream per thread, wall time
//   um_baseline skip        PTX_DIR LOOP MIB ITERS      LOOP: host_reads | kernel_reads, with
//                                                       explicit copies both ways every time
//   um_baseline alloc       PTX_DIR BYTES ROUNDS BATCH  allocate + zero + free on a stream:
//                                                       from a pool (threshold UINT64_MAX), and
//                                                       cuMemAlloc/cuMemFree, interleaved
//   um_baseline scratch     PTX_DIR BATCHES STAGE_NS    section 7's pipeline with a scratch
//                                                       buffer from a pool per batch
//
// Each prints one JSON object per line. Times are host wall-clock (steady_clock).
//
// Built with -DUM_BASELINE_SHARED as a shared library (bench.sh: libum_baseline.so), it has no
// main and exports um_cpp_alloc_open / _batch / _close (12a's pooled calls) and um_cpp_scratch
// (12b's loop), which um_bench loads to take turns with its own in one process
// (benches/um_bench/cpp_lib.rs).
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
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

static void stats(std::vector<double> v, double *median, double *min) {
    std::sort(v.begin(), v.end());
    *median = v[v.size() / 2];
    *min = v[0];
}

static CUmodule load(const std::string &dir, const char *file) {
    std::ifstream in(dir + "/" + file);
    if (!in) { fprintf(stderr, "cannot read %s/%s\n", dir.c_str(), file); exit(1); }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    CUmodule m;
    CK(cuModuleLoadData(&m, text.c_str()));
    return m;
}

static CUdevice dev;
static int sms;

// The grid um's launchers choose: 256 threads a block, up to 32 blocks per SM.
static unsigned grid_for(size_t n) {
    size_t blocks = (n + 255) / 256;
    size_t cap = (size_t)sms * 32;
    if (blocks < 1) blocks = 1;
    if (blocks > cap) blocks = cap;
    return (unsigned)blocks;
}

// cuMemPrefetchAsync in CUDA 13's form (the header maps the name to cuMemPrefetchAsync_v2).
static void prefetch(CUdeviceptr p, size_t bytes, bool to_host, CUstream s) {
    CUmemLocation loc;
    loc.type = to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = to_host ? 0 : dev;
    CK(cuMemPrefetchAsync(p, bytes, loc, 0, s));
}

static void host_process(float *data, size_t n) {
    for (size_t i = 0; i < n; i++) data[i] -= 1.0f;
}

static int launch_bench(const std::string &dir, int batches, int per_batch) {
    CUmodule m = load(dir, "testing.ptx");
    CUfunction f;
    CK(cuModuleGetFunction(&f, m, "add_scalar"));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CUdeviceptr buf;
    CK(cuMemAllocManaged(&buf, sizeof(float), CU_MEM_ATTACH_HOST));
    CK(cuStreamAttachMemAsync(s, buf, 0, CU_MEM_ATTACH_SINGLE));
    float value = 1.0f;
    unsigned n = 1;
    void *params[] = {&buf, &value, &n};
    std::vector<double> per_launch;
    for (int b = 0; b < batches; b++) {
        double t0 = now_us();
        for (int i = 0; i < per_batch; i++)
            CK(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, params, nullptr));
        double t1 = now_us();
        CK(cuStreamSynchronize(s));
        if (b > 0) per_launch.push_back((t1 - t0) / per_batch);
    }
    double med, mn;
    stats(per_launch, &med, &mn);
    printf("{\"scenario\":\"launch\",\"impl\":\"cpp\",\"median_us\":%.4f,\"min_us\":%.4f}\n", med, mn);
    CK(cuMemFree(buf));
    CK(cuStreamDestroy(s));
    return 0;
}

static int run_task_bench(const std::string &dir, const std::string &mode, int mib, int iters) {
    CUmodule m = load(dir, "run_task.ptx");
    CUfunction transform, convert;
    CK(cuModuleGetFunction(&transform, m, "transform"));
    CK(cuModuleGetFunction(&convert, m, "convert"));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    size_t n = (size_t)mib * 1024 * 1024 / sizeof(float);
    size_t bytes = n * sizeof(float);
    unsigned nn = (unsigned)n, grid = grid_for(n);
    const int warmup = 2;
    bool explicit_copies = mode == "explicit", use_prefetch = mode == "prefetch";
    bool host_resident = mode == "host_resident";
    CUdeviceptr in, data, out;       // managed, or device memory for `explicit`
    float *h_in = nullptr, *h_data = nullptr, *h_out = nullptr;
    if (explicit_copies) {
        CK(cuMemAllocHost((void **)&h_in, bytes));
        CK(cuMemAllocHost((void **)&h_data, bytes));
        CK(cuMemAllocHost((void **)&h_out, bytes));
        CK(cuMemAlloc(&in, bytes));
        CK(cuMemAlloc(&data, bytes));
        CK(cuMemAlloc(&out, bytes));
    } else {
        unsigned flag = mode == "naive" ? CU_MEM_ATTACH_GLOBAL : CU_MEM_ATTACH_HOST;
        CK(cuMemAllocManaged(&in, bytes, flag));
        CK(cuMemAllocManaged(&data, bytes, flag));
        CK(cuMemAllocManaged(&out, bytes, flag));
        h_in = (float *)in;
        h_data = (float *)data;
        h_out = (float *)out;
    }
    for (size_t i = 0; i < n; i++) { h_in[i] = (float)(i % 1000) * 0.25f; h_data[i] = 0.0f; h_out[i] = 0.0f; }
    if (explicit_copies) {
        CK(cuMemcpyHtoDAsync(in, h_in, bytes, s));
        CK(cuMemcpyHtoDAsync(data, h_data, bytes, s));
    } else if (mode != "naive") {
        CK(cuStreamAttachMemAsync(s, in, 0, CU_MEM_ATTACH_SINGLE));
        CK(cuStreamAttachMemAsync(s, data, 0, CU_MEM_ATTACH_SINGLE));
        CK(cuStreamAttachMemAsync(s, out, 0, CU_MEM_ATTACH_SINGLE));
        if (host_resident) {
            // data stays in host memory; the GPU maps it (what um's Transfer::HostResident does)
            CUmemLocation host, gpu;
            host.type = CU_MEM_LOCATION_TYPE_HOST; host.id = 0;
            gpu.type = CU_MEM_LOCATION_TYPE_DEVICE; gpu.id = dev;
            for (CUdeviceptr p : {in, data, out}) {
                CK(cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
                CK(cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, gpu));
            }
        }
        if (use_prefetch) {
            prefetch(in, bytes, false, s);
            prefetch(data, bytes, false, s);
            prefetch(out, bytes, false, s);
        }
    }
    CK(cuStreamSynchronize(s));
    void *tparams[] = {&in, &data, &nn};
    void *cparams[] = {&out, &data, &nn};
    // One sample per iteration: from its start to the next one's. The last iteration only ends
    // the last sample, so no drain after the loop is counted (the Rust side does the same).
    std::vector<double> starts;
    for (int it = 0; it < iters + warmup + 1; it++) {
        starts.push_back(now_us());
        CK(cuLaunchKernel(transform, grid, 1, 1, 256, 1, 1, 0, s, tparams, nullptr));
        if (explicit_copies) CK(cuMemcpyDtoHAsync(h_data, data, bytes, s));
        if (use_prefetch) prefetch(data, bytes, true, s);
        CK(cuStreamSynchronize(s));
        host_process(h_data, n);
        if (explicit_copies) CK(cuMemcpyHtoDAsync(data, h_data, bytes, s));
        if (use_prefetch) prefetch(data, bytes, false, s);
        CK(cuLaunchKernel(convert, grid, 1, 1, 256, 1, 1, 0, s, cparams, nullptr));
    }
    if (explicit_copies) CK(cuMemcpyDtoHAsync(h_out, out, bytes, s));
    CK(cuStreamSynchronize(s));
    std::vector<double> per_iter;
    for (size_t i = warmup; i + 1 < starts.size(); i++) per_iter.push_back((starts[i + 1] - starts[i]) / 1000.0);
    double med, mn;
    stats(per_iter, &med, &mn);
    // Checksum of `out`, so a broken run cannot pass for a fast one.
    double sum = 0;
    for (size_t i = 0; i < n; i += 4097) sum += h_out[i];
    printf("{\"scenario\":\"run_task\",\"impl\":\"cpp\",\"policy\":\"%s\",\"mib\":%d,\"iters\":%d,"
           "\"median_ms\":%.4f,\"min_ms\":%.4f,\"checksum\":%.6e}\n",
           mode.c_str(), mib, iters, med, mn, sum);
    if (explicit_copies) {
        CK(cuMemFreeHost(h_in)); CK(cuMemFreeHost(h_data)); CK(cuMemFreeHost(h_out));
    }
    CK(cuMemFree(in)); CK(cuMemFree(data)); CK(cuMemFree(out));
    CK(cuStreamDestroy(s));
    return 0;
}

// GB/s of each way bytes move between host and GPU, for `mib` MiB: prefetch of managed memory,
// on-demand migration when the CPU touches GPU-resident pages, and pinned copies.
static int bandwidth_bench(int mib) {
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    size_t bytes = (size_t)mib << 20, n = bytes / sizeof(float);
    CUdeviceptr m, d;
    float *pinned;
    CK(cuMemAllocManaged(&m, bytes, CU_MEM_ATTACH_HOST));
    CK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    CK(cuMemAlloc(&d, bytes));
    CK(cuMemAllocHost((void **)&pinned, bytes));
    memset(pinned, 1, bytes);
    float *h = (float *)m;
    for (size_t i = 0; i < n; i++) h[i] = 1.0f;
    auto gbps = [&](double us) { return bytes / us / 1e3; };
    std::vector<double> pf_h2d, pf_d2h, touch_d2h, cp_h2d, cp_d2h, pass_managed, pass_pinned;
    for (int r = 0; r < 6; r++) {
        double t0 = now_us();
        prefetch(m, bytes, false, s); CK(cuStreamSynchronize(s));
        double t1 = now_us();
        prefetch(m, bytes, true, s); CK(cuStreamSynchronize(s));
        double t2 = now_us();
        prefetch(m, bytes, false, s); CK(cuStreamSynchronize(s));
        double t3 = now_us();
        for (size_t i = 0; i < n; i += 1024) h[i] += 1.0f;  // CPU touch: on-demand migration back
        double t4 = now_us();
        CK(cuMemcpyHtoDAsync(d, pinned, bytes, s)); CK(cuStreamSynchronize(s));
        double t5 = now_us();
        CK(cuMemcpyDtoHAsync(pinned, d, bytes, s)); CK(cuStreamSynchronize(s));
        double t6 = now_us();
        // The host pass of run_task, over managed pages just prefetched to the host, and over
        // pinned memory (counted as bytes read + written).
        prefetch(m, bytes, false, s); CK(cuStreamSynchronize(s));
        prefetch(m, bytes, true, s); CK(cuStreamSynchronize(s));
        double t7 = now_us();
        host_process(h, n);
        double t8 = now_us();
        host_process(pinned, n);
        double t9 = now_us();
        if (r == 0) continue;
        pass_managed.push_back(2 * gbps(t8 - t7));
        pass_pinned.push_back(2 * gbps(t9 - t8));
        pf_h2d.push_back(gbps(t1 - t0)); pf_d2h.push_back(gbps(t2 - t1));
        touch_d2h.push_back(gbps(t4 - t3)); cp_h2d.push_back(gbps(t5 - t4)); cp_d2h.push_back(gbps(t6 - t5));
    }
    auto emit = [&](const char *what, std::vector<double> v) {
        double med, mn;
        stats(v, &med, &mn);
        // for a bandwidth, the best is the maximum: report median and max
        printf("{\"scenario\":\"bandwidth\",\"impl\":\"cpp\",\"what\":\"%s\",\"mib\":%d,\"median_gbps\":%.3f,\"max_gbps\":%.3f}\n",
               what, mib, med, *std::max_element(v.begin(), v.end()));
    };
    emit("managed prefetch, host to GPU", pf_h2d);
    emit("managed prefetch, GPU to host", pf_d2h);
    emit("managed on-demand, GPU to host (CPU touch)", touch_d2h);
    emit("pinned copy, host to GPU", cp_h2d);
    emit("pinned copy, GPU to host", cp_d2h);
    emit("CPU pass (read + write) over managed pages just prefetched to the host", pass_managed);
    emit("CPU pass (read + write) over pinned memory", pass_pinned);
    CK(cuMemFree(m)); CK(cuMemFree(d)); CK(cuMemFreeHost(pinned));
    return 0;
}

static int transitions_bench(int reps) {
    CUstream a, b;
    CK(cuStreamCreate(&a, CU_STREAM_DEFAULT));
    CK(cuStreamCreate(&b, CU_STREAM_DEFAULT));
    CUdeviceptr buf;
    CK(cuMemAllocManaged(&buf, 1 << 20, CU_MEM_ATTACH_HOST));
    std::vector<double> attach, sync_idle;
    for (int i = 0; i < reps; i++) {
        CUstream s = (i % 2) ? a : b;  // alternate, so every attach changes the association
        double t0 = now_us();
        CK(cuStreamAttachMemAsync(s, buf, 0, CU_MEM_ATTACH_SINGLE));
        double t1 = now_us();
        CK(cuStreamSynchronize(s));
        double t2 = now_us();
        CK(cuStreamSynchronize(s));  // the stream is idle now
        double t3 = now_us();
        (void)t2;
        if (i > 2) { attach.push_back(t1 - t0); sync_idle.push_back(t3 - t2); }
    }
    double am, amin, sm, smin;
    stats(attach, &am, &amin);
    stats(sync_idle, &sm, &smin);
    printf("{\"scenario\":\"transition\",\"impl\":\"cpp\",\"what\":\"attach\",\"median_us\":%.4f,\"min_us\":%.4f}\n", am, amin);
    printf("{\"scenario\":\"transition\",\"impl\":\"cpp\",\"what\":\"sync_idle\",\"median_us\":%.4f,\"min_us\":%.4f}\n", sm, smin);
    CK(cuMemFree(buf));
    return 0;
}

// One thread's run_task loop with explicit copies (the `explicit` policy above), on its own
// stream, for `threads` threads at once: wall time per iteration of all of them together.
// Buffers are allocated and filled before the clock starts, as um_bench's threads scenario does.
static int threads_bench(const std::string &dir, int mib, int threads, int iters) {
    CUmodule m = load(dir, "run_task.ptx");
    CUfunction transform, convert;
    CK(cuModuleGetFunction(&transform, m, "transform"));
    CK(cuModuleGetFunction(&convert, m, "convert"));
    size_t n = (size_t)mib * 1024 * 1024 / sizeof(float), bytes = n * sizeof(float);
    unsigned nn = (unsigned)n, grid = grid_for(n);
    struct Work { CUstream s; CUdeviceptr in, data, out; float *h_in, *h_data, *h_out; };
    std::vector<Work> w(threads);
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    // Each thread allocates and fills its own buffers (as um_bench's threads do), then waits
    // for the start; the clock runs from the start to the last thread's end.
    std::atomic<int> ready(0);
    std::atomic<bool> go(false);
    std::vector<std::thread> pool;
    for (Work &x : w) {
        pool.emplace_back([&, ctx]() {
            CK(cuCtxSetCurrent(ctx));
            CK(cuStreamCreate(&x.s, CU_STREAM_DEFAULT));
            CK(cuMemAllocHost((void **)&x.h_in, bytes));
            CK(cuMemAllocHost((void **)&x.h_data, bytes));
            CK(cuMemAllocHost((void **)&x.h_out, bytes));
            CK(cuMemAlloc(&x.in, bytes));
            CK(cuMemAlloc(&x.data, bytes));
            CK(cuMemAlloc(&x.out, bytes));
            for (size_t i = 0; i < n; i++) { x.h_in[i] = (float)(i % 1000) * 0.25f; x.h_data[i] = 0.0f; x.h_out[i] = 0.0f; }
            CK(cuMemcpyHtoDAsync(x.in, x.h_in, bytes, x.s));
            CK(cuMemcpyHtoDAsync(x.data, x.h_data, bytes, x.s));
            CK(cuMemcpyHtoDAsync(x.out, x.h_out, bytes, x.s));
            CK(cuStreamSynchronize(x.s));
            ready++;
            while (!go.load()) std::this_thread::yield();
            void *tparams[] = {&x.in, &x.data, &nn};
            void *cparams[] = {&x.out, &x.data, &nn};
            for (int it = 0; it < iters; it++) {
                CK(cuLaunchKernel(transform, grid, 1, 1, 256, 1, 1, 0, x.s, tparams, nullptr));
                CK(cuMemcpyDtoHAsync(x.h_data, x.data, bytes, x.s));
                CK(cuStreamSynchronize(x.s));
                host_process(x.h_data, n);
                CK(cuMemcpyHtoDAsync(x.data, x.h_data, bytes, x.s));
                CK(cuLaunchKernel(convert, grid, 1, 1, 256, 1, 1, 0, x.s, cparams, nullptr));
            }
            CK(cuMemcpyDtoHAsync(x.h_out, x.out, bytes, x.s));
            CK(cuStreamSynchronize(x.s));
        });
    }
    while (ready.load() < threads) std::this_thread::yield();
    double t0 = now_us();
    go = true;
    for (std::thread &t : pool) t.join();
    double ms = (now_us() - t0) / 1000.0 / iters;
    double sum = 0;
    for (Work &x : w) for (size_t i = 0; i < n; i += 4097) sum += x.h_out[i];
    // Freeing is timed apart (free_ms), as um_bench times dropping its buffers.
    double f0 = now_us();
    for (Work &x : w) {
        CK(cuMemFreeHost(x.h_in)); CK(cuMemFreeHost(x.h_data)); CK(cuMemFreeHost(x.h_out));
        CK(cuMemFree(x.in)); CK(cuMemFree(x.data)); CK(cuMemFree(x.out));
    }
    double free_ms = (now_us() - f0) / 1000.0;
    for (Work &x : w) CK(cuStreamDestroy(x.s));
    printf("{\"scenario\":\"threads\",\"impl\":\"cpp\",\"mib\":%d,\"threads\":%d,\"ms\":%.4f,\"free_ms\":%.4f,\"checksum\":%.6e}\n",
           mib, threads, ms, free_ms, sum);
    return 0;
}

// Loops where a copy could be skipped, written the way code that does not track writes is:
// every buffer the kernel uses goes to the device before it and comes back after it.
//   host_reads:   data += 2 * in (transform); the host only reads data (a sum) between kernels.
//   kernel_reads: out = 0.5 * in (convert) over a large `in` the host set once; the host reads
//                 out (a sum) between kernels.
static int skip_bench(const std::string &dir, const std::string &loop, int mib, int iters) {
    CUmodule m = load(dir, "run_task.ptx");
    CUfunction transform, convert;
    CK(cuModuleGetFunction(&transform, m, "transform"));
    CK(cuModuleGetFunction(&convert, m, "convert"));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    size_t n = (size_t)mib * 1024 * 1024 / sizeof(float), bytes = n * sizeof(float);
    unsigned nn = (unsigned)n, grid = grid_for(n);
    const int warmup = 2;
    bool host_reads = loop == "host_reads";
    float *h_in, *h_x;   // x: data (host_reads) or out (kernel_reads)
    CUdeviceptr in, x;
    CK(cuMemAllocHost((void **)&h_in, bytes));
    CK(cuMemAllocHost((void **)&h_x, bytes));
    CK(cuMemAlloc(&in, bytes));
    CK(cuMemAlloc(&x, bytes));
    for (size_t i = 0; i < n; i++) { h_in[i] = (float)(i % 1000) * 0.25f; h_x[i] = 0.0f; }
    void *tparams[] = {&in, &x, &nn};
    void *cparams[] = {&x, &in, &nn};
    std::vector<double> starts;
    double sum = 0;
    for (int it = 0; it < iters + warmup + 1; it++) {
        starts.push_back(now_us());
        CK(cuMemcpyHtoDAsync(in, h_in, bytes, s));
        CK(cuMemcpyHtoDAsync(x, h_x, bytes, s));
        if (host_reads) CK(cuLaunchKernel(transform, grid, 1, 1, 256, 1, 1, 0, s, tparams, nullptr));
        else CK(cuLaunchKernel(convert, grid, 1, 1, 256, 1, 1, 0, s, cparams, nullptr));
        CK(cuMemcpyDtoHAsync(h_in, in, bytes, s));
        CK(cuMemcpyDtoHAsync(h_x, x, bytes, s));
        CK(cuStreamSynchronize(s));
        double part = 0;
        for (size_t i = 0; i < n; i++) part += h_x[i];
        sum += part;
    }
    std::vector<double> per_iter;
    for (size_t i = warmup; i + 1 < starts.size(); i++) per_iter.push_back((starts[i + 1] - starts[i]) / 1000.0);
    double med, mn;
    stats(per_iter, &med, &mn);
    printf("{\"scenario\":\"skip\",\"impl\":\"cpp\",\"loop\":\"%s\",\"mib\":%d,\"iters\":%d,"
           "\"median_ms\":%.4f,\"min_ms\":%.4f,\"checksum\":%.6e}\n",
           loop.c_str(), mib, iters, med, mn, sum);
    CK(cuMemFreeHost(h_in)); CK(cuMemFreeHost(h_x));
    CK(cuMemFree(in)); CK(cuMemFree(x));
    CK(cuStreamDestroy(s));
    return 0;
}

// Host µs of one allocate + zero fill + free of `bytes` on a stream, two ways taking turns batch
// by batch (the order alternating every round), the stream drained between batches, untimed:
// cuMemAllocFromPoolAsync + cuMemsetD8Async + cuMemFreeAsync from a pool of its own whose
// release threshold is UINT64_MAX (um_bench's `pool with threshold u64::MAX`), and cuMemAlloc +
// cuMemsetD8Async + cuMemFree. Median and minimum over the rounds of each.
static int alloc_bench(size_t bytes, int rounds, int batch) {
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool;
    CK(cuMemPoolCreate(&pool, &props));
    cuuint64_t threshold = UINT64_MAX;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    auto pooled = [&]() {
        CUdeviceptr p;
        CK(cuMemAllocFromPoolAsync(&p, bytes, pool, s));
        CK(cuMemsetD8Async(p, 0, bytes, s));
        CK(cuMemFreeAsync(p, s));
    };
    auto plain = [&]() {
        CUdeviceptr p;
        CK(cuMemAlloc(&p, bytes));
        CK(cuMemsetD8Async(p, 0, bytes, s));
        CK(cuMemFree(p));
    };
    for (int i = 0; i < batch; i++) { pooled(); plain(); }  // warm-up
    CK(cuStreamSynchronize(s));
    std::vector<double> t_pool, t_plain;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            bool use_pool = (r + k) % 2 == 0;
            double t0 = now_us();
            for (int i = 0; i < batch; i++) {
                if (use_pool) pooled(); else plain();
            }
            double us = (now_us() - t0) / batch;
            CK(cuStreamSynchronize(s));
            (use_pool ? t_pool : t_plain).push_back(us);
        }
    }
    double pm, pmin, mm, mmin;
    stats(t_pool, &pm, &pmin);
    stats(t_plain, &mm, &mmin);
    printf("{\"scenario\":\"alloc\",\"impl\":\"cpp\",\"bytes\":%zu,\"pool_median_us\":%.4f,\"pool_min_us\":%.4f,"
           "\"malloc_median_us\":%.4f,\"malloc_min_us\":%.4f}\n",
           bytes, pm, pmin, mm, mmin);
    CK(cuMemPoolDestroy(pool));
    CK(cuStreamDestroy(s));
    return 0;
}

// 12a's pooled allocate + zero fill + free as a C ABI that um_bench calls in its own process
// (bench.sh builds this file a second time, with -DUM_BASELINE_SHARED, as
// libum_baseline.so), batch by batch, taking turns with its Rust variants: the same calls as
// `pooled` in alloc_bench, from a pool of its own (threshold UINT64_MAX) on a stream of its own,
// in the context current on the calling thread. Errors are printed and end the process.
struct AllocBench {
    CUstream s;
    CUmemoryPool pool;
    size_t bytes;
};

extern "C" {
// `batch` allocate + zero + free, timed until the last call returned (µs per allocation),
// then the stream drained, untimed.
int um_cpp_alloc_batch(AllocBench *a, int batch, double *us_per_alloc) {
    double t0 = now_us();
    for (int i = 0; i < batch; i++) {
        CUdeviceptr p;
        CK(cuMemAllocFromPoolAsync(&p, a->bytes, a->pool, a->s));
        CK(cuMemsetD8Async(p, 0, a->bytes, a->s));
        CK(cuMemFreeAsync(p, a->s));
    }
    *us_per_alloc = (now_us() - t0) / batch;
    CK(cuStreamSynchronize(a->s));
    return 0;
}

// The pool and stream for `bytes`-byte allocations, after one untimed batch of `batch`.
AllocBench *um_cpp_alloc_open(size_t bytes, int batch) {
    AllocBench *a = new AllocBench{};
    a->bytes = bytes;
    CUdevice device;
    CK(cuCtxGetDevice(&device));
    CK(cuStreamCreate(&a->s, CU_STREAM_DEFAULT));
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device;
    CK(cuMemPoolCreate(&a->pool, &props));
    cuuint64_t threshold = UINT64_MAX;
    CK(cuMemPoolSetAttribute(a->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    double us;
    um_cpp_alloc_batch(a, batch, &us);
    return a;
}

void um_cpp_alloc_close(AllocBench *a) {
    CK(cuStreamSynchronize(a->s));
    CK(cuMemPoolDestroy(a->pool));
    CK(cuStreamDestroy(a->s));
    delete a;
}
}

// Section 7's two-stage pipeline with fresh scratch per batch, as um_bench's `scratch` child
// runs it: per batch, on stream A a scratch buffer of LEN floats from a pool (threshold
// UINT64_MAX) is zeroed, spin_then_add works on it (stage A), transform adds twice it to the
// batch, and it is freed (cuMemFreeAsync); an event hands the batch to stream B, where
// spin_then_add is stage B. Batches are cuMemAlloc memory filled before the clock; host wall
// time per batch from the first enqueue to every batch back on the host (one copy per batch
// after B, then one wait). A warm-up run of 4 batches first.
static int scratch_run(const std::string &dir, int batches, unsigned long long stage_ns,
                       double *us_per_batch) {
    const unsigned LEN = 1024;
    CUmodule mt = load(dir, "testing.ptx"), mr = load(dir, "run_task.ptx");
    CUfunction spin, transform;
    CK(cuModuleGetFunction(&spin, mt, "spin_then_add"));
    CK(cuModuleGetFunction(&transform, mr, "transform"));
    CUstream a, b;
    CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool;
    CK(cuMemPoolCreate(&pool, &props));
    cuuint64_t threshold = UINT64_MAX;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    unsigned grid = grid_for(LEN), n = LEN;
    size_t bytes = LEN * sizeof(float);
    double per_batch = 0;
    for (int run = 0; run < 2; run++) {
        int count = run == 0 ? 4 : batches;
        std::vector<CUdeviceptr> x(count);
        std::vector<float> host((size_t)count * LEN);
        for (int k = 0; k < count; k++) {
            for (unsigned j = 0; j < LEN; j++) host[(size_t)k * LEN + j] = (float)(k + j);
            CK(cuMemAlloc(&x[k], bytes));
            CK(cuMemcpyHtoD(x[k], &host[(size_t)k * LEN], bytes));
        }
        float one = 1.0f, two = 2.0f;
        double t0 = now_us();
        for (int k = 0; k < count; k++) {
            CUdeviceptr scr;
            CK(cuMemAllocFromPoolAsync(&scr, bytes, pool, a));
            CK(cuMemsetD8Async(scr, 0, bytes, a));
            void *sa[] = {&scr, &one, &stage_ns, &n};
            CK(cuLaunchKernel(spin, grid, 1, 1, 256, 1, 1, 0, a, sa, nullptr));
            void *ta[] = {&scr, &x[k], &n};
            CK(cuLaunchKernel(transform, grid, 1, 1, 256, 1, 1, 0, a, ta, nullptr));
            CK(cuMemFreeAsync(scr, a));
            CK(cuEventRecord(ev, a));
            CK(cuStreamWaitEvent(b, ev, 0));
            void *sb[] = {&x[k], &two, &stage_ns, &n};
            CK(cuLaunchKernel(spin, grid, 1, 1, 256, 1, 1, 0, b, sb, nullptr));
        }
        CK(cuStreamSynchronize(b));
        per_batch = (now_us() - t0) / count;
        for (int k = 0; k < count; k++) {
            CK(cuMemcpyDtoH(&host[(size_t)k * LEN], x[k], bytes));
            for (unsigned j = 0; j < LEN; j++) {
                if (host[(size_t)k * LEN + j] != (float)(k + j) + 4.0f) {
                    fprintf(stderr, "scratch: batch %d came back wrong\n", k);
                    return 1;
                }
            }
            CK(cuMemFree(x[k]));
        }
    }
    *us_per_batch = per_batch;
    CK(cuMemPoolDestroy(pool));
    CK(cuEventDestroy(ev));
    CK(cuStreamDestroy(a));
    CK(cuStreamDestroy(b));
    CK(cuModuleUnload(mt));
    CK(cuModuleUnload(mr));
    return 0;
}

// 12b's loop as a C ABI that um_bench calls in its own process (libum_baseline.so), taking
// turns with um's loop there: the PTX from PTX_DIR, on the context current on the calling
// thread; the µs per batch into *us_per_batch. Errors are printed and end the process.
extern "C" int um_cpp_scratch(const char *ptx_dir, int batches, unsigned long long stage_ns,
                              double *us_per_batch) {
    CK(cuCtxGetDevice(&dev));
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    return scratch_run(ptx_dir, batches, stage_ns, us_per_batch);
}

#ifndef UM_BASELINE_SHARED
static int scratch_bench(const std::string &dir, int batches, unsigned long long stage_ns) {
    double per_batch = 0;
    int rc = scratch_run(dir, batches, stage_ns, &per_batch);
    if (rc != 0) return rc;
    printf("{\"scenario\":\"scratch\",\"impl\":\"cpp\",\"batches\":%d,\"stage_ns\":%llu,\"us_per_batch\":%.4f}\n",
           batches, stage_ns, per_batch);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: see the header of baseline.cpp\n"); return 2; }
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    std::string what = argv[1], dir = argv[2];
    if (what == "launch" && argc == 5) return launch_bench(dir, atoi(argv[3]), atoi(argv[4]));
    if (what == "run_task" && argc == 6) return run_task_bench(dir, argv[3], atoi(argv[4]), atoi(argv[5]));
    if (what == "transitions" && argc == 4) return transitions_bench(atoi(argv[3]));
    if (what == "bandwidth" && argc == 4) return bandwidth_bench(atoi(argv[3]));
    if (what == "threads" && argc == 6) return threads_bench(dir, atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (what == "skip" && argc == 6) return skip_bench(dir, argv[3], atoi(argv[4]), atoi(argv[5]));
    if (what == "alloc" && argc == 6) return alloc_bench(strtoull(argv[3], nullptr, 10), atoi(argv[4]), atoi(argv[5]));
    if (what == "scratch" && argc == 5) return scratch_bench(dir, atoi(argv[3]), strtoull(argv[4], nullptr, 10));
    fprintf(stderr, "usage: see the header of baseline.cpp\n");
    return 2;
}
#endif
