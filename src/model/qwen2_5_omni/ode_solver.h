// The flow-matching sampler of Qwen2.5-Omni's token2wav DiT (transformers' RungeKutta4ODESolver
// and the time grid of Qwen2_5OmniToken2WavDiTModel.sample): fixed-step Runge-Kutta of the 3/8
// rule over a "sway" time grid that crowds the steps near t = 0.
//
// Pure functions over tensor ops: the state lives on the device the initial value is on, and the
// ODE function is called 4 times per step, in order, from the calling thread.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace omni::model::qwen2_5_omni {

// dx/dt = f(t, x): returns a new tensor of x's shape, dtype and device.
using OdeFunction = std::function<tensor::Tensor(float t, const tensor::Tensor& x)>;

// `num_steps` points t_i = linspace(0, 1, num_steps) (float32 as torch.linspace computes it),
// each moved by t += sway * (cos(pi t / 2) - 1 + t), in float32 (sway -1 is the released sampler's).
// num_steps >= 2 (kInvalidArgument otherwise).
std::vector<float> sway_time_points(int num_steps, float sway_coefficient);

// Integrates from x0 at time_points[0] through each following point with one step of the 3/8 rule
// each: k1 = f(t, x), k2 = f(t + h/3, x + h k1/3), k3 = f(t + 2h/3, x + h (k2 - k1/3)),
// k4 = f(t + h, x + h (k1 - k2 + k3)), x += h (k1 + 3 (k2 + k3) + k4) / 8. Returns the state at the
// last point; x0 [..., D] contiguous float32 is not modified. At least 2 points (kInvalidArgument).
tensor::Tensor integrate_rk4_38(const OdeFunction& f, const tensor::Tensor& x0, std::span<const float> time_points);

}  // namespace omni::model::qwen2_5_omni
