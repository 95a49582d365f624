// Which files of a Hub repository omnistage downloads: what a pipeline reads (safetensors weights
// and their index, the configs, tokenizer and processor files, chat templates, in the root or in a
// component folder such as Qwen3-TTS's speech_tokenizer/), never the other weight formats
// (*.bin, *.pt, *.onnx, *.gguf…), images or documentation a repository also holds.
#pragma once

#include <string_view>

namespace omni::hub {

enum class FileSet {
  kPipeline,   // everything serving or generating needs
  kTokenizer,  // the configuration, tokenizer, processor and chat template files, no weights
  kConfig,     // only the configuration files (`omnistage config` reads no weights or tokenizer)
};

// Whether `file` (a repository path such as "speech_tokenizer/model.safetensors") belongs to `set`.
bool wanted_file(std::string_view file, FileSet set);

}  // namespace omni::hub
