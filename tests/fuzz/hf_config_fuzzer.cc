// libFuzzer target for a checkpoint's config.json and generation_config.json (model/hf_config):
// the input, written as both files of a model folder, is read the way a stage reads it, and as a
// Qwen3-Omni config.json's talker_config and code2wav_config.
// What must hold: anything malformed or out of range is an omni::Error naming the file and field.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/json.h"
#include "fuzz_guard.h"
#include "model/hf_config.h"
#include "model/qwen3_omni/code2wav.h"
#include "model/qwen3_omni/talker_config.h"

namespace {

const std::filesystem::path& folder() {
  static const std::filesystem::path dir = [] {
    auto path = std::filesystem::temp_directory_path() / ("omni-fuzz-hf-config-" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  return dir;
}

void write(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

void run(const uint8_t* data, size_t size) {
  write(folder() / "config.json", data, size);
  write(folder() / "generation_config.json", data, size);
  omni::fuzz::expect_only_omni_errors("hf_config_fuzzer", [] { omni::model::read_generation_defaults(folder()); });
  omni::fuzz::expect_only_omni_errors("hf_config_fuzzer", [] { omni::model::read_text_model_config(folder()); });
  // A nested text_config, as a multimodal checkpoint has it.
  const omni::Json* parsed = nullptr;
  omni::Json holder;
  omni::fuzz::expect_only_omni_errors("hf_config_fuzzer", [&] {
    holder = omni::Json::parse(std::string(reinterpret_cast<const char*>(data), size), nullptr, false);
    if (!holder.is_discarded()) parsed = &holder;
  });
  if (parsed != nullptr) {
    omni::fuzz::expect_only_omni_errors("hf_config_fuzzer", [&] {
      omni::model::parse_text_model_config(omni::Json{{"text_config", *parsed}}["text_config"],
                                           "config.json: text_config");
      if (parsed->is_object() && parsed->contains("eos_token_id")) {
        omni::model::parse_token_ids((*parsed)["eos_token_id"], "eos_token_id");
      }
    });
    omni::fuzz::expect_only_omni_errors("hf_config_fuzzer",
                                        [&] { omni::model::qwen3_omni::parse_talker_config(*parsed, "config.json"); });
    omni::fuzz::expect_only_omni_errors(
        "hf_config_fuzzer", [&] { omni::model::qwen3_omni::parse_code2wav_config(*parsed, "config.json"); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run(data, size);
  return 0;
}
