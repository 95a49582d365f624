// Bidirectional attention of one sequence (ops::attention) on CUDA, for image transformers and the
// VAE's mid-block: every query sees every key. Shapes the fused kernel takes (cuda/
// dense_flash_attention.cu: 16-bit, head size 64 or 128) go there; the rest (float32, the VAE's one
// 512-wide head) take the materialised path here: two batched matrix products (one batch per head)
// around a row softmax, through cuBLASLt:
//   scores[h] = q[h] k[h]^T in float32 (16-bit inputs, float32 accumulation and output), so the
//   softmax sees unrounded scores as the CPU's does; p[h] = softmax(scores[h] * scale) rounded to
//   the dtype once (the rounding the flash kernel applies before its second product); out[h] = p[h]
//   v[h], written straight into out's [S, heads, D] rows (the heads are strided views, no copies).
// Queries are taken in chunks so that the scores of a chunk stay within kScoreBytes. The softmax
// kernel is cuda/dense_attention_softmax.cu.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/image_kernels.h"

namespace omni::tensor::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// Scores (and probabilities) of one chunk of queries, over all heads.
constexpr int64_t kScoreBytes = int64_t{1} << 30;

void check_blas(cublasStatus_t status, const char* what, int device) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_error(ErrorCode::kInternal, "attention: {} on cuda:{}: cuBLASLt status {}", what, device,
                static_cast<int>(status));
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

// Largest power of two up to 256 dividing both the address and the batch stride in bytes: what
// every batch's matrix of that operand starts at.
uint32_t alignment_of(const void* ptr, int64_t stride_bytes) {
  const auto address = reinterpret_cast<uintptr_t>(ptr) | static_cast<uintptr_t>(stride_bytes);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// One strided-batched product: matrices in cuBLASLt's column-major terms.
struct Operand {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld, stride;
  uint32_t align;
};

struct ProductShape {
  Operand a, b, c;
  bool transpose_a;
  int batches;

  auto key() const {
    auto op = [](const Operand& o) {
      return std::tuple(static_cast<int>(o.type), o.rows, o.cols, o.ld, o.stride, o.align);
    };
    return std::tuple(op(a), op(b), op(c), transpose_a, batches);
  }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct DeviceBlas {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<decltype(std::declval<ProductShape>().key()), std::unique_ptr<Plan>> plans;
};

std::mutex& blas_mutex() {
  static std::mutex mutex;
  return mutex;
}

// One handle, workspace and plan cache per device; never destroyed.
DeviceBlas& blas_for(int device) {
  static auto* all = new std::map<int, DeviceBlas>();
  DeviceBlas& blas = (*all)[device];
  if (blas.handle == nullptr) {
    check_blas(cublasLtCreate(&blas.handle), "cublasLtCreate", device);
    blas.workspace = DeviceAllocator::allocate(kWorkspaceBytes, device);
  }
  return blas;
}

cublasLtMatrixLayout_t make_layout(const Operand& o, int batches, int device) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_blas(cublasLtMatrixLayoutCreate(&layout, o.type, o.rows, o.cols, o.ld), "cublasLtMatrixLayoutCreate", device);
  check_blas(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batches, sizeof batches),
             "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", device);
  check_blas(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &o.stride, sizeof o.stride),
      "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", device);
  return layout;
}

// C = op(A) B for every batch, float32 accumulation (float32 inputs stay float32: no TF32).
void product(const ProductShape& s, const void* a, const void* b, void* c, int device) {
  cudaStream_t stream = stream_for(device);
  std::lock_guard lock(blas_mutex());
  DeviceBlas& blas = blas_for(device);
  std::unique_ptr<Plan>& plan = blas.plans[s.key()];
  if (!plan) {
    auto fresh = std::make_unique<Plan>();
    check_blas(cublasLtMatmulDescCreate(&fresh->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate",
               device);
    const cublasOperation_t trans_a = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
    check_blas(cublasLtMatmulDescSetAttribute(fresh->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a),
               "cublasLtMatmulDescSetAttribute(TRANSA)", device);
    check_blas(cublasLtMatmulDescSetAttribute(fresh->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b),
               "cublasLtMatmulDescSetAttribute(TRANSB)", device);
    fresh->a = make_layout(s.a, s.batches, device);
    fresh->b = make_layout(s.b, s.batches, device);
    fresh->c = make_layout(s.c, s.batches, device);
    cublasLtMatmulPreference_t pref = nullptr;
    check_blas(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", device);
    const uint64_t workspace = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &s.a.align,
                                         sizeof s.a.align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &s.b.align,
                                         sizeof s.b.align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &s.c.align,
                                         sizeof s.c.align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &s.c.align,
                                         sizeof s.c.align);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(blas.handle, fresh->op, fresh->a, fresh->b, fresh->c,
                                                                 fresh->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      throw_error(ErrorCode::kUnsupported,
                  "attention: cuBLASLt has no algorithm for {} batches of {}x{} products on cuda:{}", s.batches,
                  s.c.rows, s.c.cols, device);
    }
    fresh->algo = result.algo;
    plan = std::move(fresh);
  }
  const float alpha = 1.0f, beta = 0.0f;
  check_blas(cublasLtMatmul(blas.handle, plan->op, &alpha, a, plan->a, b, plan->b, &beta, c, plan->c, c, plan->c,
                            &plan->algo, blas.workspace, kWorkspaceBytes, stream),
             "cublasLtMatmul", device);
}

}  // namespace

bool flash_attention_supports(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& out) {
  const DType dtype = q.dtype();
  if (dtype != DType::kBF16 && dtype != DType::kF16) return false;
  const int64_t d = q.dim(2);
  if (d != 64 && d != 128) return false;
  // Sequence lengths are int in the kernel, heads a grid dimension.
  constexpr int64_t kMaxLength = int64_t{1} << 30;
  if (q.dim(0) >= kMaxLength || k.dim(0) >= kMaxLength || q.dim(1) > 65535) return false;
  if (!(scale > 0.0f) || !std::isfinite(scale)) return false;
  for (const Tensor* t : {&q, &k, &v, &out}) {
    if (reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0) return false;
  }
  return true;
}

void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) {
  if (!flash_attention_supports(q, k, v, scale, out)) {
    throw_error(ErrorCode::kUnsupported,
                "flash_attention: q {} in {} with scale {} (the kernel takes head size 64 or 128, bfloat16 or "
                "float16, 16-byte aligned operands and a positive finite scale)",
                shape_to_string(q.shape()), dtype_name(q.dtype()), scale);
  }
  launch_flash_attention(q, k, v, scale, out);
}

void dense_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) {
  if (flash_attention_supports(q, k, v, scale, out)) return flash_attention(q, k, v, scale, out);
  materialised_attention(q, k, v, scale, out);
}

void materialised_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) {
  const int64_t s = q.dim(0), heads = q.dim(1), d = q.dim(2), skv = k.dim(0);
  if (s == 0 || heads == 0 || d == 0) return;
  const int device = out.device().index;
  if (skv == 0) {
    zero_bytes(out.raw(), out.nbytes(), device);
    return;
  }
  const DType dtype = q.dtype();
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  const bool separate_probs = dtype != DType::kF32;
  const int64_t row_bytes = heads * skv * (4 + (separate_probs ? elem : 0));
  const int64_t chunk = std::max<int64_t>(1, std::min(s, kScoreBytes / row_bytes));
  Tensor scores = Tensor::empty({heads * chunk * skv}, DType::kF32, out.device());
  Tensor probs = separate_probs ? Tensor::empty({heads * chunk * skv}, dtype, out.device()) : scores;
  const cudaDataType_t type = blas_type(dtype);
  const int64_t ld = heads * d;
  const auto* q_bytes = static_cast<const char*>(q.raw());
  auto* out_bytes = static_cast<char*>(out.raw());
  for (int64_t first = 0; first < s; first += chunk) {
    const int64_t n = std::min(chunk, s - first);
    const void* q_chunk = q_bytes + first * ld * elem;
    void* out_chunk = out_bytes + first * ld * elem;
    // scores^T [skv, n] (column-major, per head) = k[h] (stored d x skv, transposed) x q[h]^T (d x n).
    ProductShape qk;
    qk.a = {type, static_cast<uint64_t>(d), static_cast<uint64_t>(skv), ld, d, alignment_of(k.raw(), d * elem)};
    qk.b = {type, static_cast<uint64_t>(d), static_cast<uint64_t>(n), ld, d, alignment_of(q_chunk, d * elem)};
    qk.c = {CUDA_R_32F,
            static_cast<uint64_t>(skv),
            static_cast<uint64_t>(n),
            skv,
            n * skv,
            alignment_of(scores.raw(), n * skv * 4)};
    qk.transpose_a = true;
    qk.batches = static_cast<int>(heads);
    product(qk, k.raw(), q_chunk, scores.raw(), device);
    scaled_softmax(scores.slice_rows(0, heads * n * skv).reshape({heads * n, skv}), scale,
                   probs.slice_rows(0, heads * n * skv).reshape({heads * n, skv}));
    // out[h]^T [d, n] = v[h] (stored d x skv) x p[h]^T (skv x n).
    ProductShape pv;
    pv.a = {type, static_cast<uint64_t>(d), static_cast<uint64_t>(skv), ld, d, alignment_of(v.raw(), d * elem)};
    pv.b = {type,
            static_cast<uint64_t>(skv),
            static_cast<uint64_t>(n),
            skv,
            n * skv,
            alignment_of(probs.raw(), n * skv * elem)};
    pv.c = {type, static_cast<uint64_t>(d), static_cast<uint64_t>(n), ld, d, alignment_of(out_chunk, d * elem)};
    pv.transpose_a = false;
    pv.batches = static_cast<int>(heads);
    product(pv, v.raw(), probs.raw(), out_chunk, device);
  }
}

}  // namespace omni::tensor::cuda
