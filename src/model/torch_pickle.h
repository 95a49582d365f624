// Reading a torch.save file without Python: the zip container (model/stored_zip.h) holding
// `<archive>/data.pkl`, a pickle (protocol 2) whose tensors are persistent ids naming storages
// under `<archive>/data/<key>`. For side files of checkpoints (Qwen2.5-Omni's spk_dict.pt: a dict
// of dicts of tensors, ints and strings), never for weights.
//
// Strict: exactly the opcodes torch.save emits for containers (dict, list, tuple) of tensors, ints,
// floats, strings, bools and None; the only globals it accepts are torch._utils._rebuild_tensor_v2,
// collections.OrderedDict and the storage classes torch.FloatStorage, BFloat16Storage and
// HalfStorage. Anything else is kLoadFailed naming the file, the byte offset in data.pkl and the
// opcode (or the global). Tensors come out as contiguous float32 host tensors whatever their stored
// dtype, strides or offset. The result is immutable and may be read from several threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace omni::model {

struct PickleValue {
  // kGlobal (text: "module.name") and kStorage (text: the storage key) exist only while unpickling:
  // a loaded result never holds them.
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kTensor, kGlobal, kStorage };
  using Ptr = std::shared_ptr<PickleValue>;

  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string text;
  std::vector<Ptr> items;                    // kTuple, kList
  std::vector<std::pair<Ptr, Ptr>> entries;  // kDict, in insertion order
  tensor::Tensor tensor;                     // kTensor: float32, contiguous, on the host

  // The value of the entry whose key is the string `key` of a dict; nullptr when it has none (or
  // this is not a dict).
  const PickleValue* find(std::string_view key) const;
  // "dict", "tensor", ...: for error messages.
  static const char* kind_name(Kind kind);
};

// Loads `path` (kNotFound for a missing file; kLoadFailed as above).
PickleValue::Ptr load_torch_file(const std::filesystem::path& path);

}  // namespace omni::model
