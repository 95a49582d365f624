// NumPy .npy files (format 1.0, little-endian, C order) for float32 and int32 tensors: the
// format of --dump-logits and of the Hugging Face reference outputs in tests/data/.
#pragma once

#include <filesystem>

#include "tensor/tensor.h"

namespace omni::tensor {

// Writes a contiguous CPU tensor of float32 or int32; errors (kInvalidArgument for other
// dtypes, kInternal when the file cannot be written) name the path.
void save_npy(const std::filesystem::path& path, const Tensor& tensor);

// Reads a float32, int32 or int64 array into a new CPU tensor (a uint8 one widens to int32); a missing file is kNotFound, anything
// else unreadable (other dtypes, Fortran order, truncated data) is kLoadFailed naming the path.
Tensor load_npy(const std::filesystem::path& path);

}  // namespace omni::tensor
