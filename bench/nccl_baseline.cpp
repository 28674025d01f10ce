// The C++ baseline of um_bench's NCCL scenario (docs/performance.md, section 8): NCCL called
// directly on cuMemAlloc buffers, one process, every GPU, one thread issuing a group of
// all-reduces (one per GPU) per step, as nccl-tests does with -g N.
//
//   nvcc -O3 -o nccl_baseline bench/nccl_baseline.cpp -lnccl -lcuda
//   ./nccl_baseline allreduce --sizes 8,1048576,... [--gpus N]
//
// Prints one JSON object per size: {"bytes":B,"gpus":N,"iters":K,"time_us":T,"algbw":A,"busbw":BB}
// (GB/s; busbw = algbw * 2(n-1)/n, the nccl-tests formula). A size whose two buffers would take
// more than half a GPU's free memory is skipped with {"bytes":B,"skipped":"..."}.
// Where nccl.h is missing (only the runtime library installed), the prototypes below are used.
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if __has_include(<nccl.h>)
#include <nccl.h>
#else
extern "C" {
typedef struct ncclComm *ncclComm_t;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclFloat32 = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, CUstream stream);
const char *ncclGetErrorString(ncclResult_t result);
}
#endif

#define CU(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *s_ = nullptr;                                                              \
            cuGetErrorName(r_, &s_);                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, s_ ? s_ : "?"); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define NC(call)                                                                                   \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                   \
                    ncclGetErrorString(r_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

// The iteration count um_bench uses for the same size (benches/um_bench/nccl.rs, `iters`).
static int iters_for(size_t bytes) {
    size_t k = (size_t(4) << 30) / (bytes ? bytes : 1);
    if (k < 20) k = 20;
    if (k > 1000) k = 1000;
    return int(k);
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "allreduce") != 0) {
        fprintf(stderr, "usage: %s allreduce --sizes B1,B2,.. [--gpus N]\n", argv[0]);
        return 2;
    }
    std::vector<size_t> sizes;
    int gpus = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--sizes") == 0) {
            std::string list = argv[i + 1];
            size_t at = 0;
            while (at < list.size()) {
                size_t comma = list.find(',', at);
                if (comma == std::string::npos) comma = list.size();
                sizes.push_back(std::stoull(list.substr(at, comma - at)));
                at = comma + 1;
            }
        } else if (strcmp(argv[i], "--gpus") == 0) {
            gpus = atoi(argv[i + 1]);
        }
    }
    CU(cuInit(0));
    int count = 0;
    CU(cuDeviceGetCount(&count));
    if (gpus <= 0 || gpus > count) gpus = count;
    if (gpus < 2) {
        fprintf(stderr, "needs at least 2 GPUs, found %d\n", count);
        return 2;
    }
    std::vector<CUcontext> ctx(gpus);
    std::vector<CUstream> stream(gpus);
    std::vector<int> devs(gpus);
    for (int g = 0; g < gpus; ++g) {
        CUdevice d;
        CU(cuDeviceGet(&d, g));
        CU(cuDevicePrimaryCtxRetain(&ctx[g], d));
        CU(cuCtxSetCurrent(ctx[g]));
        CU(cuStreamCreate(&stream[g], CU_STREAM_DEFAULT));
        devs[g] = g;
    }
    std::vector<ncclComm_t> comm(gpus);
    NC(ncclCommInitAll(comm.data(), gpus, devs.data()));
    for (size_t bytes : sizes) {
        size_t n = bytes / sizeof(float);
        if (n == 0) n = 1;
        bool fits = true;
        for (int g = 0; g < gpus; ++g) {
            size_t free_b = 0, total_b = 0;
            CU(cuCtxSetCurrent(ctx[g]));
            CU(cuMemGetInfo(&free_b, &total_b));
            if (2 * n * sizeof(float) > free_b / 2) fits = false;
        }
        if (!fits) {
            printf("{\"bytes\":%zu,\"skipped\":\"more than half the free memory\"}\n", bytes);
            fflush(stdout);
            continue;
        }
        std::vector<CUdeviceptr> send(gpus), recv(gpus);
        for (int g = 0; g < gpus; ++g) {
            CU(cuCtxSetCurrent(ctx[g]));
            CU(cuMemAlloc(&send[g], n * sizeof(float)));
            CU(cuMemAlloc(&recv[g], n * sizeof(float)));
            float one = 1.0f;
            unsigned bits;
            memcpy(&bits, &one, 4);
            CU(cuMemsetD32(send[g], bits, n));
            CU(cuMemsetD32(recv[g], 0, n));
        }
        auto step = [&]() {
            NC(ncclGroupStart());
            for (int g = 0; g < gpus; ++g) {
                NC(ncclAllReduce((const void *)send[g], (void *)recv[g], n, ncclFloat32, ncclSum, comm[g],
                                 stream[g]));
            }
            NC(ncclGroupEnd());
        };
        auto drain = [&]() {
            for (int g = 0; g < gpus; ++g) {
                CU(cuCtxSetCurrent(ctx[g]));
                CU(cuStreamSynchronize(stream[g]));
            }
        };
        int iters = iters_for(n * sizeof(float));
        int warm = iters / 10 < 3 ? 3 : iters / 10;
        for (int i = 0; i < warm; ++i) step();
        drain();
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) step();
        drain();
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
        double algbw = double(n * sizeof(float)) / (us * 1e-6) / 1e9;
        double busbw = algbw * 2.0 * (gpus - 1) / gpus;
        // Every element is the sum of `gpus` ones: a wrong result is a failure, not a figure.
        float check = 0.0f;
        CU(cuCtxSetCurrent(ctx[0]));
        CU(cuMemcpyDtoH(&check, recv[0] + (n - 1) * sizeof(float), sizeof(float)));
        if (check != float(gpus)) {
            fprintf(stderr, "wrong all-reduce result at %zu bytes: %f\n", bytes, check);
            return 1;
        }
        printf("{\"bytes\":%zu,\"gpus\":%d,\"iters\":%d,\"time_us\":%.3f,\"algbw\":%.3f,\"busbw\":%.3f}\n",
               n * sizeof(float), gpus, iters, us, algbw, busbw);
        fflush(stdout);
        for (int g = 0; g < gpus; ++g) {
            CU(cuCtxSetCurrent(ctx[g]));
            CU(cuMemFree(send[g]));
            CU(cuMemFree(recv[g]));
        }
    }
    for (int g = 0; g < gpus; ++g) ncclCommDestroy(comm[g]);
    return 0;
}
