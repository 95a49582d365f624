// libFuzzer target for checkpoint files (model/safetensors): the safetensors header and
// model.safetensors.index.json. The first byte picks the layout: even, the rest is
// model.safetensors; odd, the rest is the index (up to a NUL) and one shard (after it). Every
// tensor the checkpoint lists is then loaded as float32 with its own shape.
// What must hold: a malformed header, offsets outside the file, an index naming a missing shard
// or a tensor twice are omni::Errors naming the file; no read leaves the mapping.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_guard.h"
#include "model/safetensors.h"

namespace {

const std::filesystem::path& folder() {
  static const std::filesystem::path dir = [] {
    auto path = std::filesystem::temp_directory_path() / ("omni-fuzz-safetensors-" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  return dir;
}

void write(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void run(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::filesystem::remove(folder() / "model.safetensors");
  std::filesystem::remove(folder() / "model.safetensors.index.json");
  if (data[0] % 2 == 0) {
    write(folder() / "model.safetensors", rest);
  } else {
    const size_t split = rest.find('\0');
    write(folder() / "model.safetensors.index.json", rest.substr(0, split));
    write(folder() / "model-00001-of-00001.safetensors", split == std::string_view::npos ? "" : rest.substr(split + 1));
  }
  const omni::model::Checkpoint checkpoint = omni::model::Checkpoint::open(folder());
  const std::filesystem::path file_path =
      folder() / (data[0] % 2 == 0 ? "model.safetensors" : "model-00001-of-00001.safetensors");
  const omni::model::SafetensorsFile file(file_path);
  for (const std::string& name : checkpoint.tensor_names()) {
    const omni::model::SafetensorsEntry* entry = file.find(name);
    if (entry == nullptr) continue;
    // The shape the file declares is the one asked for, so the load gets past the shape check
    // and reads the tensor's bytes.
    omni::fuzz::expect_only_omni_errors("safetensors_fuzzer", [&] {
      if (omni::tensor::shape_numel(entry->shape) > (int64_t{1} << 20)) return;  // the fuzzer's memory
      omni::tensor::Tensor tensor = checkpoint.load_f32(name, entry->shape);
      (void)tensor;
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors("safetensors_fuzzer", [&] { run(data, size); });
  return 0;
}
