// One distinct token of a row's history that a sampling penalty applies to: what the sample()
// dispatcher (tensor/ops.cc) counts on the host and hands to the backends.
#pragma once

#include <cstdint>

namespace omni::tensor {

struct PenalisedToken {
  int32_t row;
  int32_t token;
  int32_t output_count;  // occurrences in the row's output so far
  int32_t in_prompt;     // 1 when the token is in the prompt and the row has a repetition penalty
};

}  // namespace omni::tensor
