// How long one cuBLAS dot product takes to reach the host, four ways, on one non-blocking
// stream of cudaMalloc memory, each iteration an axpy followed by the dot (or by nothing):
//   host-mode               cublasDdot in CUBLAS_POINTER_MODE_HOST (the textbook call)
//   device-mode-into-pinned cublasDdot in device pointer mode, its result written straight into
//                           cudaMallocHost memory, then cudaStreamSynchronize (what um's
//                           Blas::dot does)
//   device+memcpy           device pointer mode into device memory, cudaMemcpyAsync to pinned
//                           memory, cudaStreamSynchronize
//   axpy+sync               the axpy and the synchronize alone (the floor)
// at 1000, 10^6 and 1.6 * 10^7 doubles, 5 rounds each; µs per iteration.
//
//   nvcc -O2 -o dot_result_probe dot_result_probe.cu -lcublas && ./dot_result_probe
//
// bench/notes.md has a run and what it shows.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cmath>
#define C(x) do { auto e=(x); if ((int)e) { printf("%s failed %d\n", #x, (int)e); return 1; } } while(0)
int main() {
  for (int n : {1000, 1000000, 16000000}) {
    double *x, *y, *dres, *pinned;
    C(cudaMalloc(&x, 8.0*n)); C(cudaMalloc(&y, 8.0*n)); C(cudaMalloc(&dres, 8));
    C(cudaMallocHost(&pinned, 8));
    cudaStream_t s; C(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t h; C(cublasCreate(&h)); C(cublasSetStream(h, s));
    std::vector<double> ones(n, 1.0);
    C(cudaMemcpy(x, ones.data(), 8.0*n, cudaMemcpyHostToDevice));
    C(cudaMemcpy(y, ones.data(), 8.0*n, cudaMemcpyHostToDevice));
    int iters = n >= 16000000 ? 300 : 3000;
    double a = 0.0;  // the axpy runs, and leaves y (so every dot is n, in every mode)
    for (int round = 0; round < 5; round++) {
      double t[4], sums[4];
      for (int mode = 0; mode < 4; mode++) {
        double sum = 0;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; i++) {
          C(cublasDaxpy(h, n, &a, x, 1, y, 1));
          double r = 0;
          if (mode == 0) { C(cublasDdot(h, n, x, 1, y, 1, &r)); }
          else if (mode == 1) {
            C(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
            C(cublasDdot(h, n, x, 1, y, 1, pinned));
            C(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
            C(cudaStreamSynchronize(s)); r = *(volatile double*)pinned;
          } else if (mode == 2) {
            C(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
            C(cublasDdot(h, n, x, 1, y, 1, dres));
            C(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
            C(cudaMemcpyAsync(pinned, dres, 8, cudaMemcpyDeviceToHost, s));
            C(cudaStreamSynchronize(s)); r = *(volatile double*)pinned;
          } else {
            C(cudaStreamSynchronize(s)); // axpy alone + sync: the floor
          }
          sum += r;
        }
        t[mode] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
        sums[mode] = sum;
      }
      bool agree = std::fabs(sums[1] - sums[0]) <= 1e-9 * std::fabs(sums[0]) && std::fabs(sums[2] - sums[0]) <= 1e-9 * std::fabs(sums[0]);
      printf("n=%d round=%d us/iter: host-mode %.2f  device-mode-into-pinned %.2f  device+memcpy %.2f  axpy+sync %.2f  results agree: %s\n", n, round, t[0], t[1], t[2], t[3], agree ? "yes" : "NO");
    }
    cublasDestroy(h); cudaStreamDestroy(s); cudaFree(x); cudaFree(y); cudaFree(dres); cudaFreeHost(pinned);
  }
  return 0;
}
