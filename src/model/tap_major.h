// The weight of a 1-D convolution laid out for ops::unfold_rows: a convolution over x [T, C_in]
// is ops::linear of unfold_rows(x) with this weight.
#pragma once

#include "tensor/tensor.h"

namespace omni::model {

// A PyTorch Conv1d weight [C_out, C_in, k] (float32, on the host) as [C_out, k * C_in], tap-major:
// one row of the unfolded input (k taps of C_in channels) meets one row of it. A new host tensor.
tensor::Tensor tap_major_weight(const tensor::Tensor& weight);

}  // namespace omni::model
