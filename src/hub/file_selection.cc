#include "hub/file_selection.h"

#include <array>

namespace omni::hub {

namespace {

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// Configuration files, read to pick and configure the pipeline and its stages.
constexpr std::array<std::string_view, 5> kConfigFiles = {"config.json", "generation_config.json", "model_index.json",
                                                          "scheduler_config.json", "configuration.json"};

// What the tokenizer, the processors and the chat template read (and Qwen2.5-Omni's speaker
// conditioning, which its talker needs although it is a .pt file).
constexpr std::array<std::string_view, 12> kTextAndProcessorFiles = {"tokenizer.json",
                                                                     "tokenizer_config.json",
                                                                     "vocab.json",
                                                                     "merges.txt",
                                                                     "special_tokens_map.json",
                                                                     "added_tokens.json",
                                                                     "tokenizer.model",
                                                                     "preprocessor_config.json",
                                                                     "processor_config.json",
                                                                     "video_preprocessor_config.json",
                                                                     "chat_template.json",
                                                                     "spk_dict.pt"};

}  // namespace

bool wanted_file(std::string_view file, FileSet set) {
  const size_t slash = file.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? file : file.substr(slash + 1);
  // Hidden files (.gitattributes) and the consolidated checkpoints some repositories keep under
  // original/ for other runtimes are never needed.
  if (base.empty() || base.front() == '.' || file.starts_with("original/")) return false;
  for (std::string_view name : kConfigFiles) {
    if (base == name) return true;
  }
  if (set == FileSet::kConfig) return false;
  for (std::string_view name : kTextAndProcessorFiles) {
    if (base == name) return true;
  }
  if (base.starts_with("chat_template") && (ends_with(base, ".jinja") || ends_with(base, ".json"))) return true;
  if (set == FileSet::kTokenizer) return false;
  return ends_with(base, ".safetensors") || ends_with(base, ".safetensors.index.json");
}

}  // namespace omni::hub
