// Conjugate gradient on the 5-point Laplacian of an N x N grid (N^2 rows, SPD), in double:
// cuSPARSE SpMV (CSR) and cuBLAS level 1 (dot, axpy, scal, copy) on cudaMalloc memory, one
// stream, the textbook loop with two dot products read on the host per iteration. The C++
// reference of examples/conjugate_gradient.rs, which runs the same loop on um's owned buffers.
//
//   cg_baseline N ITERS REPS
//
// Runs ITERS iterations (no early exit, so both sides do the same work) REPS times from x = 0,
// b = 1, and prints one line per repetition:
//   cg_cpp rows=R nnz=Z iters=K loop_ms=T residual=RES
// loop_ms is the host wall time of the K iterations, ended by the last dot's host read (the
// update of p enqueued after it is not waited for); residual is
// sqrt(r.r) after them, as the loop computed it.
//
// Built with -DUM_BASELINE_SHARED -shared -Xcompiler -fPIC (bench.sh: libum_cg_baseline.so) it
// has no main and exports um_cpp_cg, the same solve, which um_bench loads to take turns with the
// example's solve in one process (benches/um_bench/solver.rs).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusparse.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(x)                                                              \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)
#define CHECK_SPARSE(x)                                                            \
  do {                                                                             \
    cusparseStatus_t s_ = (x);                                                     \
    if (s_ != CUSPARSE_STATUS_SUCCESS) {                                           \
      std::fprintf(stderr, "%s: %s\n", #x, cusparseGetErrorString(s_));            \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)
#define CHECK_BLAS(x)                                                              \
  do {                                                                             \
    cublasStatus_t s_ = (x);                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                             \
      std::fprintf(stderr, "%s: status %d\n", #x, (int)s_);                        \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

// The 5-point Laplacian of an n x n grid with Dirichlet boundaries, CSR, columns increasing.
static void laplacian(int n, std::vector<int>& offsets, std::vector<int>& cols, std::vector<double>& vals) {
  long long rows = (long long)n * n;
  offsets.assign(1, 0);
  for (long long r = 0; r < rows; r++) {
    long long i = r / n, j = r % n;
    if (i > 0) { cols.push_back((int)(r - n)); vals.push_back(-1.0); }
    if (j > 0) { cols.push_back((int)(r - 1)); vals.push_back(-1.0); }
    cols.push_back((int)r); vals.push_back(4.0);
    if (j < n - 1) { cols.push_back((int)(r + 1)); vals.push_back(-1.0); }
    if (i < n - 1) { cols.push_back((int)(r + n)); vals.push_back(-1.0); }
    offsets.push_back((int)cols.size());
  }
}

// REPS repetitions of ITERS iterations on the n x n grid, on the current device's primary
// context; each repetition's loop time into loop_ms (if not null) and, if print, its line.
// Everything it made is freed before it returns.
static int cg_run(int n, int iters, int reps, double* loop_ms, bool print) {
  std::vector<int> offsets, cols;
  std::vector<double> vals;
  laplacian(n, offsets, cols, vals);
  int rows = n * n, nnz = (int)cols.size();
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cusparseHandle_t sp;
  cublasHandle_t bl;
  CHECK_SPARSE(cusparseCreate(&sp));
  CHECK_SPARSE(cusparseSetStream(sp, stream));
  CHECK_BLAS(cublasCreate(&bl));
  CHECK_BLAS(cublasSetStream(bl, stream));

  int *d_off, *d_col;
  double *d_val, *x, *r, *p, *q, *b;
  CHECK_CUDA(cudaMalloc(&d_off, sizeof(int) * (rows + 1)));
  CHECK_CUDA(cudaMalloc(&d_col, sizeof(int) * nnz));
  CHECK_CUDA(cudaMalloc(&d_val, sizeof(double) * nnz));
  for (double** v : {&x, &r, &p, &q, &b}) CHECK_CUDA(cudaMalloc(v, sizeof(double) * rows));
  CHECK_CUDA(cudaMemcpy(d_off, offsets.data(), sizeof(int) * (rows + 1), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_col, cols.data(), sizeof(int) * nnz, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_val, vals.data(), sizeof(double) * nnz, cudaMemcpyHostToDevice));
  std::vector<double> ones(rows, 1.0);
  CHECK_CUDA(cudaMemcpy(b, ones.data(), sizeof(double) * rows, cudaMemcpyHostToDevice));

  cusparseSpMatDescr_t A;
  cusparseDnVecDescr_t vp, vq;
  CHECK_SPARSE(cusparseCreateCsr(&A, rows, rows, nnz, d_off, d_col, d_val, CUSPARSE_INDEX_32I,
                                 CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
  CHECK_SPARSE(cusparseCreateDnVec(&vp, rows, p, CUDA_R_64F));
  CHECK_SPARSE(cusparseCreateDnVec(&vq, rows, q, CUDA_R_64F));
  double one = 1.0, zero = 0.0;
  size_t bytes = 0;
  CHECK_SPARSE(cusparseSpMV_bufferSize(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vp, &zero, vq,
                                       CUDA_R_64F, CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
  void* work = nullptr;
  if (bytes > 0) CHECK_CUDA(cudaMalloc(&work, bytes));

  for (int rep = 0; rep < reps; rep++) {
    // x = 0, r = b, p = r, rr = r.r
    CHECK_CUDA(cudaMemsetAsync(x, 0, sizeof(double) * rows, stream));
    CHECK_BLAS(cublasDcopy(bl, rows, b, 1, r, 1));
    CHECK_BLAS(cublasDcopy(bl, rows, r, 1, p, 1));
    double rr;
    CHECK_BLAS(cublasDdot(bl, rows, r, 1, r, 1, &rr));
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < iters; k++) {
      CHECK_SPARSE(cusparseSpMV(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vp, &zero, vq,
                                CUDA_R_64F, CUSPARSE_SPMV_ALG_DEFAULT, work));  // q = A p
      double pq;
      CHECK_BLAS(cublasDdot(bl, rows, p, 1, q, 1, &pq));
      double alpha = rr / pq, minus = -alpha;
      CHECK_BLAS(cublasDaxpy(bl, rows, &alpha, p, 1, x, 1));  // x += alpha p
      CHECK_BLAS(cublasDaxpy(bl, rows, &minus, q, 1, r, 1));  // r -= alpha q
      double rr_new;
      CHECK_BLAS(cublasDdot(bl, rows, r, 1, r, 1, &rr_new));
      double beta = rr_new / rr;
      CHECK_BLAS(cublasDscal(bl, rows, &beta, p, 1));        // p = beta p
      CHECK_BLAS(cublasDaxpy(bl, rows, &one, r, 1, p, 1));   // p += r
      rr = rr_new;
    }
    // The loop's time ends at its last host read (the last dot), as um's does; the p update
    // after it is left to the synchronize below, on both sides.
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (loop_ms) loop_ms[rep] = ms;
    if (print)
      std::printf("cg_cpp rows=%d nnz=%d iters=%d loop_ms=%.3f residual=%.6e\n", rows, nnz, iters, ms, std::sqrt(rr));
  }
  CHECK_SPARSE(cusparseDestroyDnVec(vp));
  CHECK_SPARSE(cusparseDestroyDnVec(vq));
  CHECK_SPARSE(cusparseDestroySpMat(A));
  if (work) CHECK_CUDA(cudaFree(work));
  for (void* v : {(void*)d_off, (void*)d_col, (void*)d_val, (void*)x, (void*)r, (void*)p, (void*)q, (void*)b})
    CHECK_CUDA(cudaFree(v));
  CHECK_BLAS(cublasDestroy(bl));
  CHECK_SPARSE(cusparseDestroy(sp));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

// The C ABI that um_bench calls in its own process (bench.sh builds this file a second time,
// with -DUM_BASELINE_SHARED, as libum_cg_baseline.so), taking turns with um's solves there:
// REPS loops of ITERS iterations on the N x N grid, each loop's ms into loop_ms[REPS]. Errors
// are printed and end the process.
extern "C" int um_cpp_cg(int n, int iters, int reps, double* loop_ms) {
  return cg_run(n, iters, reps, loop_ms, false);
}

#ifndef UM_BASELINE_SHARED
int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  int iters = argc > 2 ? std::atoi(argv[2]) : 100;
  int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  return cg_run(n, iters, reps, nullptr, true);
}
#endif
