#include "model/seeded_normal.h"

#include <cmath>

#include "tensor/philox.h"

namespace omni::model {

tensor::Tensor seeded_standard_normal(const tensor::Shape& shape, uint64_t seed) {
  tensor::Tensor out = tensor::Tensor::empty(shape, tensor::DType::kF32);
  float* data = out.data<float>();
  const int64_t n = out.numel();
  for (int64_t pair = 0; 2 * pair < n; ++pair) {
    const tensor::Philox4x32 block =
        tensor::philox4x32_10({{static_cast<uint32_t>(pair), static_cast<uint32_t>(pair >> 32), 0x5A17u, 0u}},
                              static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    // Two uniforms in (0, 1] and [0, 1) from 32 bits each, then Box-Muller in double.
    const double u1 = (static_cast<double>(block.v[0]) + 1.0) / 4294967296.0;
    const double u2 = static_cast<double>(block.v[1]) / 4294967296.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    data[2 * pair] = static_cast<float>(r * std::cos(2.0 * M_PI * u2));
    if (2 * pair + 1 < n) data[2 * pair + 1] = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
  }
  return out;
}

}  // namespace omni::model
