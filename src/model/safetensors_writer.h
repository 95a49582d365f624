// Writing safetensors files: for generated checkpoints (random-weight models for benchmarks and
// demos) and test fixtures. Not used on the serving path.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace omni::model {

// Collects named float32 tensors and writes them in one file, converted to `dtype` (F32, BF16 or
// F16 is not offered: nothing we generate needs it). Tensors are copied when added, so the
// caller's buffers may be reused. Not thread-safe.
class SafetensorsWriter {
 public:
  // dtype: kF32 or kBF16 (else kInvalidArgument).
  explicit SafetensorsWriter(tensor::DType dtype);

  // values holds shape_numel(shape) floats; a repeated name is kInvalidArgument.
  void add(const std::string& name, const tensor::Shape& shape, const float* values);
  // Writes the file (header sorted by name, as Hugging Face writes it); kInternal naming the
  // path when it cannot be written.
  void write(const std::filesystem::path& path) const;

 private:
  struct Pending {
    std::string name;
    tensor::Shape shape;
    std::vector<char> bytes;
  };
  tensor::DType dtype_;
  std::vector<Pending> tensors_;
};

}  // namespace omni::model
