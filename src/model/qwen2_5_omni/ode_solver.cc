#include "model/qwen2_5_omni/ode_solver.h"

#include <cmath>

#include "base/error.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

// [D] filled with `value`, on `device`: the scale vector of ops::add_scaled.
Tensor constant(int64_t d, float value, tensor::Device device) {
  Tensor host = Tensor::empty({d}, DType::kF32);
  std::fill_n(host.data<float>(), d, value);
  return host.to(device);
}

Tensor like(const Tensor& x) { return Tensor::empty(x.shape(), DType::kF32, x.device()); }

}  // namespace

std::vector<float> sway_time_points(int num_steps, float sway_coefficient) {
  if (num_steps < 2) {
    throw_error(ErrorCode::kInvalidArgument, "the token2wav sampler needs at least 2 time points (got {})", num_steps);
  }
  // torch.linspace in float32: the first half counts up from the start, the second down from the end.
  const float step = 1.0f / static_cast<float>(num_steps - 1);
  const int halfway = num_steps / 2;
  std::vector<float> t(num_steps);
  for (int i = 0; i < num_steps; ++i) {
    t[i] = i < halfway ? step * static_cast<float>(i) : 1.0f - step * static_cast<float>(num_steps - i - 1);
  }
  constexpr float kHalfPi = static_cast<float>(M_PI / 2.0);
  for (float& v : t) v += sway_coefficient * (std::cos(kHalfPi * v) - 1.0f + v);
  return t;
}

Tensor integrate_rk4_38(const OdeFunction& f, const Tensor& x0, std::span<const float> time_points) {
  if (time_points.size() < 2) {
    throw_error(ErrorCode::kInvalidArgument, "integrate_rk4_38 needs at least 2 time points (got {})",
                time_points.size());
  }
  if (x0.dtype() != DType::kF32 || x0.rank() < 1 || !x0.is_contiguous()) {
    throw_error(ErrorCode::kInvalidArgument, "integrate_rk4_38: the initial value must be a contiguous float32 tensor");
  }
  const int64_t d = x0.dim(-1);
  const tensor::Device device = x0.device();
  const float third = 1.0f / 3.0f, two_thirds = 2.0f / 3.0f;
  const Tensor minus_one = constant(d, -1.0f, device), minus_third = constant(d, -third, device);
  const Tensor three = constant(d, 3.0f, device);
  Tensor x = x0.to(device);  // a copy: the steps update it in place
  Tensor probe = like(x0), tmp = like(x0);
  for (size_t i = 0; i + 1 < time_points.size(); ++i) {
    const float t0 = time_points[i], t1 = time_points[i + 1], h = t1 - t0;
    const Tensor k1 = f(t0, x);
    ops::add_scaled(x, k1, constant(d, h * third, device), probe);
    const Tensor k2 = f(t0 + h * third, probe);
    ops::add_scaled(k2, k1, minus_third, tmp);  // k2 - k1 / 3
    ops::add_scaled(x, tmp, constant(d, h, device), probe);
    const Tensor k3 = f(t0 + h * two_thirds, probe);
    ops::add_scaled(k1, k2, minus_one, tmp);  // k1 - k2 + k3
    ops::add(tmp, k3, tmp);
    ops::add_scaled(x, tmp, constant(d, h, device), probe);
    const Tensor k4 = f(t1, probe);
    ops::add(k2, k3, tmp);  // k1 + 3 (k2 + k3) + k4
    ops::add_scaled(k1, tmp, three, tmp);
    ops::add(tmp, k4, tmp);
    ops::add_scaled(x, tmp, constant(d, h / 8.0f, device), x);
  }
  return x;
}

}  // namespace omni::model::qwen2_5_omni
