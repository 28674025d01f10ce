// A reproducer, without um, of compute-sanitizer racecheck's hazards inside cuSPARSE's own SpMV
// kernel (`cusparse::csrmv_v3_kernel`): the products that tests/gpu/gpu_cusparse.rs and
// examples/conjugate_gradient.rs make through um, made here with cuSPARSE's generic API alone.
// The CSR matrices are the tests' own (the same generator, column indices strictly increasing
// in every row, as cuSPARSE's CSR format asks), plus the 5-point Laplacian the solver uses;
// managed memory on a stream of its own, as um gives cuSPARSE.
//
// The GPU runner (xtask/src/run.rs, `cusparse_racecheck_note`) builds and runs it under
// racecheck when a program's only racecheck reports are inside cuSPARSE's kernels:
//   nvcc -O2 -std=c++17 -o racecheck_cusparse racecheck_cusparse.cu -lcusparse
//   compute-sanitizer --tool racecheck ./racecheck_cusparse
//
// Prints "racecheck_cusparse: P products, W of V values wrong" and exits 0 when every value is
// right (the values are small integers: exact in both precisions), 1 otherwise, 2 on an error
// of CUDA or cuSPARSE.
#include <cuda_runtime.h>
#include <cusparse.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(x)                                                                     \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "racecheck_cusparse: %s: %s\n", #x, cudaGetErrorString(e_));   \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)
#define CHECK_SPARSE(x)                                                                   \
  do {                                                                                    \
    cusparseStatus_t e_ = (x);                                                            \
    if (e_ != CUSPARSE_STATUS_SUCCESS) {                                                  \
      std::fprintf(stderr, "racecheck_cusparse: %s: %s\n", #x, cusparseGetErrorString(e_)); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

struct Csr {
  int rows, cols;
  std::vector<int> offsets, indices;
  std::vector<double> values;
};

// The tests' `matrix(rows, cols)`: 0 to 6 entries per row, every fifth row empty, values -4..4.
static Csr test_matrix(int rows, int cols) {
  uint64_t state = 0x2545f4914f6cdd1dull;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  Csr m{rows, cols, {0}, {}, {}};
  for (int r = 0; r < rows; ++r) {
    if (r % 5 != 4) {
      uint64_t count = next() % 7;
      std::vector<int> cs;
      for (uint64_t i = 0; i < count; ++i) cs.push_back(int(next() % uint64_t(cols)));
      std::sort(cs.begin(), cs.end());
      cs.erase(std::unique(cs.begin(), cs.end()), cs.end());
      for (int c : cs) {
        m.indices.push_back(c);
        m.values.push_back(double(next() % 9) - 4.0);
      }
    }
    m.offsets.push_back(int(m.indices.size()));
  }
  return m;
}

// The solver's matrix: the 5-point Laplacian of an n x n grid.
static Csr laplacian(int n) {
  Csr m{n * n, n * n, {0}, {}, {}};
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      int r = i * n + j;
      auto put = [&](int c, double v) {
        m.indices.push_back(c);
        m.values.push_back(v);
      };
      if (i > 0) put(r - n, -1.0);
      if (j > 0) put(r - 1, -1.0);
      put(r, 4.0);
      if (j + 1 < n) put(r + 1, -1.0);
      if (i + 1 < n) put(r + n, -1.0);
      m.offsets.push_back(int(m.indices.size()));
    }
  return m;
}

template <typename T>
static cudaDataType data_type();
template <>
cudaDataType data_type<float>() {
  return CUDA_R_32F;
}
template <>
cudaDataType data_type<double>() {
  return CUDA_R_64F;
}

template <typename T>
static T *managed(const std::vector<T> &host) {
  T *p = nullptr;
  CHECK_CUDA(cudaMallocManaged(&p, host.size() * sizeof(T)));
  for (size_t i = 0; i < host.size(); ++i) p[i] = host[i];
  return p;
}

// y = op(A) x on `stream`; the count of values of y that differ from the CPU's.
template <typename T>
static size_t product(cusparseHandle_t h, cudaStream_t stream, const Csr &m, bool transpose,
                      size_t *checked) {
  int xn = transpose ? m.rows : m.cols, yn = transpose ? m.cols : m.rows;
  std::vector<T> x(xn), want(yn, T(0));
  for (int i = 0; i < xn; ++i) x[i] = T(i % 3);
  for (int r = 0; r < m.rows; ++r)
    for (int k = m.offsets[r]; k < m.offsets[r + 1]; ++k) {
      int c = m.indices[k];
      if (transpose)
        want[c] += T(m.values[k]) * x[r];
      else
        want[r] += T(m.values[k]) * x[c];
    }
  std::vector<T> vals(m.values.begin(), m.values.end());
  int *off = managed(m.offsets), *idx = managed(m.indices);
  T *val = managed(vals), *dx = managed(x), *dy = managed(std::vector<T>(yn, T(0)));
  cusparseSpMatDescr_t a;
  cusparseDnVecDescr_t vx, vy;
  CHECK_SPARSE(cusparseCreateCsr(&a, m.rows, m.cols, int64_t(m.indices.size()), off, idx, val,
                                 CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                                 data_type<T>()));
  CHECK_SPARSE(cusparseCreateDnVec(&vx, xn, dx, data_type<T>()));
  CHECK_SPARSE(cusparseCreateDnVec(&vy, yn, dy, data_type<T>()));
  T one = 1, zero = 0;
  auto op = transpose ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE;
  size_t bytes = 0;
  CHECK_SPARSE(cusparseSpMV_bufferSize(h, op, &one, a, vx, &zero, vy, data_type<T>(),
                                       CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
  void *work = nullptr;
  if (bytes > 0) CHECK_CUDA(cudaMalloc(&work, bytes));
  CHECK_SPARSE(cusparseSpMV(h, op, &one, a, vx, &zero, vy, data_type<T>(),
                            CUSPARSE_SPMV_ALG_DEFAULT, work));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  size_t wrong = 0;
  for (int i = 0; i < yn; ++i) wrong += dy[i] != want[i];
  *checked += size_t(yn);
  CHECK_SPARSE(cusparseDestroySpMat(a));
  CHECK_SPARSE(cusparseDestroyDnVec(vx));
  CHECK_SPARSE(cusparseDestroyDnVec(vy));
  for (void *p : {(void *)off, (void *)idx, (void *)val, (void *)dx, (void *)dy})
    CHECK_CUDA(cudaFree(p));
  if (work) CHECK_CUDA(cudaFree(work));
  return wrong;
}

int main() {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cusparseHandle_t h;
  CHECK_SPARSE(cusparseCreate(&h));
  CHECK_SPARSE(cusparseSetStream(h, stream));
  // The shapes of gpu_cusparse's tests that racecheck reported in, and the solver's matrix.
  const int shapes[][2] = {{40, 33}, {41, 34}, {37, 29}, {40, 29}, {64, 64}, {97, 61}, {301, 257}};
  std::vector<Csr> matrices;
  for (auto &s : shapes) matrices.push_back(test_matrix(s[0], s[1]));
  matrices.push_back(laplacian(64));
  size_t products = 0, wrong = 0, checked = 0;
  for (const Csr &m : matrices)
    for (bool t : {false, true}) {
      wrong += product<double>(h, stream, m, t, &checked);
      wrong += product<float>(h, stream, m, t, &checked);
      products += 2;
    }
  CHECK_SPARSE(cusparseDestroy(h));
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("racecheck_cusparse: %zu products, %zu of %zu values wrong\n", products, wrong,
              checked);
  return wrong == 0 ? 0 : 1;
}
