#include "model/safetensors_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "base/error.h"
#include "base/json.h"

namespace omni::model {

SafetensorsWriter::SafetensorsWriter(tensor::DType dtype) : dtype_(dtype) {
  if (dtype != tensor::DType::kF32 && dtype != tensor::DType::kBF16) {
    throw_error(ErrorCode::kInvalidArgument, "safetensors writer: dtype {} is not supported (float32, bfloat16)",
                tensor::dtype_name(dtype));
  }
}

void SafetensorsWriter::add(const std::string& name, const tensor::Shape& shape, const float* values) {
  for (const Pending& p : tensors_) {
    if (p.name == name) throw_error(ErrorCode::kInvalidArgument, "safetensors writer: tensor '{}' added twice", name);
  }
  const size_t n = static_cast<size_t>(tensor::shape_numel(shape));
  Pending p{name, shape, std::vector<char>(n * tensor::dtype_size(dtype_))};
  if (dtype_ == tensor::DType::kF32) {
    std::memcpy(p.bytes.data(), values, n * sizeof(float));
  } else {
    auto* out = reinterpret_cast<uint16_t*>(p.bytes.data());
    for (size_t i = 0; i < n; ++i) out[i] = tensor::f32_to_bf16(values[i]);
  }
  tensors_.push_back(std::move(p));
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  std::vector<const Pending*> order;
  for (const Pending& p : tensors_) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) { return a->name < b->name; });
  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const Pending* p : order) {
    header[p->name] = {{"dtype", dtype_ == tensor::DType::kF32 ? "F32" : "BF16"},
                       {"shape", p->shape},
                       {"data_offsets", {offset, offset + p->bytes.size()}}};
    offset += p->bytes.size();
  }
  std::string text = header.dump();
  // The data section starts 8-byte aligned, as the reference writer pads it.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw_error(ErrorCode::kInternal, "{}: cannot open for writing", path.string());
  uint64_t len = text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Pending* p : order) out.write(p->bytes.data(), static_cast<std::streamsize>(p->bytes.size()));
  if (!out) throw_error(ErrorCode::kInternal, "{}: write failed", path.string());
}

}  // namespace omni::model
