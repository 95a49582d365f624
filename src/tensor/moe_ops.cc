#include "tensor/moe_ops.h"

#include "base/error.h"

#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/moe_kernels.h"
#endif

namespace omni::tensor::ops {
namespace {

// Defined, contiguous, on one CUDA device (the first tensor's).
Device cuda_device(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> args) {
  const Device device = args.begin()->second->device();
  for (const auto& [name, t] : args) {
    if (!t->defined()) throw_error(ErrorCode::kInvalidArgument, "{}: {} is not defined", op, name);
    if (!t->is_contiguous()) throw_error(ErrorCode::kInvalidArgument, "{}: {} is not contiguous", op, name);
    if (t->device() != device) {
      throw_error(ErrorCode::kInvalidArgument, "{}: {} is on {} but {} is on {}", op, name, device_name(t->device()),
                  args.begin()->first, device_name(device));
    }
  }
#ifdef OMNI_HAVE_CUDA
  if (device.type == DeviceType::kCuda) return device;
#endif
  throw_error(ErrorCode::kUnsupported, "{}: no implementation for {} (a CUDA op; the CPU routes on the host)", op,
              device_name(device));
}

void expect(bool ok, const char* op, const char* what, const Tensor& t) {
  if (!ok) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} (got {} {})", op, what, dtype_name(t.dtype()),
                shape_to_string(t.shape()));
  }
}

bool is_float(const Tensor& t) {
  return t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16;
}

}  // namespace

void moe_route(const Tensor& logits, int top_k, bool norm_topk_prob, Tensor& experts, Tensor& weights) {
  const char* op = "moe_route";
  cuda_device(op, {{"logits", &logits}, {"experts", &experts}, {"weights", &weights}});
  expect(is_float(logits) && logits.rank() == 2 && logits.dim(1) >= 1, op, "logits must be [T, E] floating", logits);
  if (top_k < 1 || top_k > 64 || top_k > logits.dim(1)) {
    throw_error(ErrorCode::kInvalidArgument, "moe_route: top_k {} is outside [1, min({} experts, 64)]", top_k,
                logits.dim(1));
  }
  const Shape chosen{logits.dim(0), top_k};
  expect(experts.dtype() == DType::kI32 && experts.shape() == chosen, op, "experts must be [T, top_k] int32", experts);
  expect(weights.dtype() == logits.dtype() && weights.shape() == chosen, op,
         "weights must be [T, top_k] in logits' dtype", weights);
#ifdef OMNI_HAVE_CUDA
  cuda::moe_route(logits, top_k, norm_topk_prob, experts, weights);
#endif
}

void moe_group(const Tensor& experts, int num_experts, Tensor& offsets, Tensor& rows, Tensor& index) {
  const char* op = "moe_group";
  cuda_device(op, {{"experts", &experts}, {"offsets", &offsets}, {"rows", &rows}, {"index", &index}});
  expect(experts.dtype() == DType::kI32 && experts.rank() == 2, op, "experts must be [T, K] int32", experts);
  if (num_experts < 1 || num_experts > 4096) {
    throw_error(ErrorCode::kInvalidArgument, "moe_group: num_experts {} is outside [1, 4096]", num_experts);
  }
  expect(experts.numel() <= INT32_MAX, op, "experts must hold fewer than 2^31 pairs", experts);
  expect(offsets.dtype() == DType::kI32 && offsets.shape() == Shape{num_experts + 1}, op,
         "offsets must be [num_experts + 1] int32", offsets);
  expect(rows.dtype() == DType::kI32 && rows.shape() == Shape{experts.numel()}, op, "rows must be [T * K] int32", rows);
  expect(index.dtype() == DType::kI32 && index.shape() == experts.shape(), op, "index must be like experts", index);
#ifdef OMNI_HAVE_CUDA
  cuda::moe_group(experts, num_experts, offsets, rows, index);
#endif
}

bool grouped_linear_supports(const Tensor& x, const Tensor& w) {
#ifdef OMNI_HAVE_CUDA
  return x.defined() && w.defined() && x.rank() == 2 && w.rank() == 2 && x.device().type == DeviceType::kCuda &&
         cuda::grouped_linear_supports(x, w);
#else
  (void)x;
  (void)w;
  return false;
#endif
}

void grouped_linear(const Tensor& x, const Tensor& rows, const Tensor& w, const Tensor& offsets, int64_t group_rows,
                    Tensor& out) {
  const char* op = "grouped_linear";
  cuda_device(op, {{"x", &x}, {"w", &w}, {"offsets", &offsets}, {"out", &out}});
  expect(is_float(x) && x.rank() == 2, op, "x must be [R, K] floating", x);
  expect(w.dtype() == x.dtype() && w.rank() == 2 && w.dim(1) == x.dim(1), op, "w must be [E * N, K] in x's dtype", w);
  expect(offsets.dtype() == DType::kI32 && offsets.rank() == 1 && offsets.dim(0) >= 2, op,
         "offsets must be [E + 1] int32", offsets);
  const int64_t experts = offsets.dim(0) - 1;
  expect(w.dim(0) % experts == 0, op, "w's rows must be a multiple of the experts (offsets' length - 1)", w);
  const int64_t n = w.dim(0) / experts;
  expect(out.dtype() == x.dtype() && out.rank() == 2 && out.dim(1) == n && out.dim(0) <= INT32_MAX, op,
         "out must be [P, N] in x's dtype", out);
  if (rows.defined()) {
    cuda_device(op, {{"x", &x}, {"rows", &rows}});
    expect(rows.dtype() == DType::kI32 && rows.shape() == Shape{out.dim(0)}, op, "rows must be [P] int32", rows);
  } else {
    expect(x.dim(0) == out.dim(0), op, "without rows, x must have out's rows", x);
  }
  if (!grouped_linear_supports(x, w)) {
    throw_error(ErrorCode::kInvalidArgument,
                "grouped_linear: K = {} must be a multiple of 16 bytes of {} and x, w 16-byte aligned", x.dim(1),
                dtype_name(x.dtype()));
  }
  if (group_rows < 1) throw_error(ErrorCode::kInvalidArgument, "grouped_linear: group_rows {} < 1", group_rows);
#ifdef OMNI_HAVE_CUDA
  cuda::grouped_linear(x, rows, w, offsets, group_rows, out);
#endif
}

}  // namespace omni::tensor::ops
