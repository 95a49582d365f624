// Matrix products: few-row products of a weight in the [N, K] layout go to the matrix-vector
// kernel (cuda/gemv.cu), which reads the weight at close to the memory bandwidth where cuBLASLt
// reaches a quarter of it; the rest go through cuBLASLt. Row-major C[M, N] = A[M, K] @ B is computed as the
// column-major C^T[N, M] = B^T A^T, so the weight is cuBLASLt's "A" operand. The heuristic's
// best algorithm is cached per (device, shape, dtype, layout, bias, pointer alignment): the
// lookup costs tens of microseconds, a decode step issues hundreds of products of a few shapes.
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "base/error.h"
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_blas(cublasStatus_t status, const char* what, int device) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_error(ErrorCode::kInternal, "{} on cuda:{}: cuBLASLt status {}", what, device, static_cast<int>(status));
  }
}

cudaDataType_t blas_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// Largest power of two up to 256 that divides the address (what cuBLASLt's kernels may assume).
uint32_t alignment_of(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int, bool, bool, uint32_t, uint32_t, uint32_t, uint32_t>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct DeviceBlas {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

// One handle, workspace and plan cache per device; never destroyed (plans outlive static tensors).
DeviceBlas& blas_for(int device) {
  static auto* all = new std::map<int, DeviceBlas>();
  DeviceBlas& blas = (*all)[device];
  if (blas.handle == nullptr) {
    check_blas(cublasLtCreate(&blas.handle), "cublasLtCreate", device);
    blas.workspace = DeviceAllocator::allocate(kWorkspaceBytes, device);
  }
  return blas;
}

std::mutex& blas_mutex() {
  static std::mutex mutex;
  return mutex;
}

// C[M, N] = A[M, K] @ (B^T if b_is_nk else B) (+ bias), all row-major, one dtype.
void gemm(const Tensor& a, const Tensor& b, bool b_is_nk, const Tensor& bias, Tensor& out) {
  const int device = out.device().index;
  const int64_t m = a.dim(0), k = a.dim(1), n = out.dim(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    zero_bytes(out.raw(), out.nbytes(), device);
    if (bias.defined()) add_row_bias(bias, out);
    return;
  }
  cudaStream_t stream = stream_for(device);
  std::lock_guard lock(blas_mutex());
  DeviceBlas& blas = blas_for(device);
  const PlanKey key{device,
                    m,
                    n,
                    k,
                    static_cast<int>(a.dtype()),
                    b_is_nk,
                    bias.defined(),
                    alignment_of(a.raw()),
                    alignment_of(b.raw()),
                    alignment_of(out.raw()),
                    bias.defined() ? alignment_of(bias.raw()) : 256u};
  std::unique_ptr<Plan>& plan = blas.plans[key];
  if (!plan) {
    auto fresh = std::make_unique<Plan>();
    const cudaDataType_t type = blas_type(a.dtype());
    // float32 accumulation for every dtype; float32 inputs stay exact float32 (no TF32).
    check_blas(cublasLtMatmulDescCreate(&fresh->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate",
               device);
    const cublasOperation_t trans_w = b_is_nk ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t trans_x = CUBLAS_OP_N;
    check_blas(cublasLtMatmulDescSetAttribute(fresh->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof trans_w),
               "cublasLtMatmulDescSetAttribute(TRANSA)", device);
    check_blas(cublasLtMatmulDescSetAttribute(fresh->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_x, sizeof trans_x),
               "cublasLtMatmulDescSetAttribute(TRANSB)", device);
    if (bias.defined()) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      check_blas(cublasLtMatmulDescSetAttribute(fresh->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
                 "cublasLtMatmulDescSetAttribute(EPILOGUE)", device);
      const cudaDataType_t bias_type = type;
      check_blas(
          cublasLtMatmulDescSetAttribute(fresh->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type),
          "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)", device);
    }
    // Column-major views: the weight [N, K] row-major is K x N with ld K (used transposed);
    // [K, N] row-major is N x K with ld N. x [M, K] is K x M with ld K; out is N x M with ld N.
    if (b_is_nk) {
      check_blas(cublasLtMatrixLayoutCreate(&fresh->a, type, k, n, k), "cublasLtMatrixLayoutCreate(w)", device);
    } else {
      check_blas(cublasLtMatrixLayoutCreate(&fresh->a, type, n, k, n), "cublasLtMatrixLayoutCreate(w)", device);
    }
    check_blas(cublasLtMatrixLayoutCreate(&fresh->b, type, k, m, k), "cublasLtMatrixLayoutCreate(x)", device);
    check_blas(cublasLtMatrixLayoutCreate(&fresh->c, type, n, m, n), "cublasLtMatrixLayoutCreate(out)", device);

    cublasLtMatmulPreference_t pref = nullptr;
    check_blas(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", device);
    const uint64_t workspace = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    const uint32_t align_w = std::get<8>(key), align_x = std::get<7>(key), align_c = std::get<9>(key);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w, sizeof align_w);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_x, sizeof align_x);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(blas.handle, fresh->op, fresh->a, fresh->b, fresh->c,
                                                                 fresh->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      throw_error(ErrorCode::kUnsupported, "cuBLASLt has no algorithm for [{}, {}] x [{}, {}] in {} on cuda:{}", m, k,
                  b_is_nk ? n : k, b_is_nk ? k : n, dtype_name(a.dtype()), device);
    }
    fresh->algo = result.algo;
    plan = std::move(fresh);
  }
  if (bias.defined()) {
    const void* bias_ptr = bias.raw();
    check_blas(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr),
               "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", device);
  }
  const float alpha = 1.0f, beta = 0.0f;
  check_blas(cublasLtMatmul(blas.handle, plan->op, &alpha, b.raw(), plan->a, a.raw(), plan->b, &beta, out.raw(),
                            plan->c, out.raw(), plan->c, &plan->algo, blas.workspace, kWorkspaceBytes, stream),
             "cublasLtMatmul", device);
}

// Where gemv beat cuBLASLt on an H200 (bf16, graph-replayed, docs/performance.md "Few-row products:
// gemv against cuBLASLt"): weights of up to 3 Mi elements for up to kGemvMaxRows rows (cuBLASLt has
// too few tiles for N <= 2048: 1.2-4x), and of up to 16 Mi elements for one or two rows (1.1-1.9x
// from 2048 x 6144 down). Larger weights and more rows are within 7% of the bandwidth through
// cuBLASLt, which is as fast or faster there.
constexpr int64_t kGemvAnyRowsMaxWeight = int64_t{3} << 20;
constexpr int64_t kGemvFewRowsMaxWeight = int64_t{16} << 20;
constexpr int64_t kGemvFewRows = 2;

bool gemv_faster(const Tensor& x, const Tensor& w, const Tensor& out) {
  const int64_t weight = w.dim(0) * w.dim(1);
  const bool faster = weight <= kGemvAnyRowsMaxWeight || (x.dim(0) <= kGemvFewRows && weight <= kGemvFewRowsMaxWeight);
  return out.numel() > 0 && faster;
}

bool prefer_gemv(const Tensor& x, const Tensor& w, const Tensor& out) {
  return gemv_faster(x, w, out) && gemv_supports(x, w);
}

}  // namespace

bool linear_prefers_gemv(GemvFusion fusion, const Tensor& x, const Tensor& w, const Tensor& norm_weight,
                         const Tensor& out) {
  return gemv_faster(x, w, out) && gemv_supports(fusion, x, w, norm_weight);
}

void matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out) {
  if (transpose_b && prefer_gemv(a, b, out)) return gemv(a, b, Tensor(), out);
  gemm(a, b, transpose_b, Tensor(), out);
}

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  if (prefer_gemv(x, w, out)) return gemv(x, w, bias, out);
  gemm(x, w, true, bias, out);
}

void linear_cublas(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) { gemm(x, w, true, bias, out); }

}  // namespace omni::tensor::cuda
