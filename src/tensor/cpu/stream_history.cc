// prepend_history on the CPU: plain row copies (tensor/ops.h).
#include <cstring>

#include "tensor/cpu/kernels.h"

namespace omni::tensor::cpu {

void prepend_history(const Tensor& x, std::span<const int64_t> rows, std::span<Tensor> histories, Tensor& out) {
  const int64_t h = histories[0].dim(0);
  const size_t row_bytes = static_cast<size_t>(x.dim(1)) * sizeof(float);
  const auto* in = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(out.raw());
  for (size_t s = 0; s < rows.size(); ++s) {
    const size_t history_bytes = static_cast<size_t>(h) * row_bytes,
                 new_bytes = static_cast<size_t>(rows[s]) * row_bytes;
    std::memcpy(dst, histories[s].raw(), history_bytes);
    std::memcpy(dst + history_bytes, in, new_bytes);
    // The segment's last h rows: what the stream's next rows need.
    std::memcpy(histories[s].raw(), dst + new_bytes, history_bytes);
    in += new_bytes;
    dst += history_bytes + new_bytes;
  }
}

}  // namespace omni::tensor::cpu
