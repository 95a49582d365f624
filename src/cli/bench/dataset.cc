#include "cli/bench/dataset.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <random>

#include "base/base64.h"
#include "base/error.h"

namespace omni::cli::bench {
namespace {

// Common English words: text prompts whose length in words roughly tracks their length in tokens
// for BPE tokenizers.
constexpr const char* kWords[] = {
    "the",  "of",   "and",   "to",    "in",    "is",    "you",  "that",  "it",     "he",   "was",  "for",   "on",
    "are",  "as",   "with",  "his",   "they",  "at",    "be",   "this",  "have",   "from", "or",   "one",   "had",
    "by",   "word", "but",   "not",   "what",  "all",   "were", "we",    "when",   "your", "can",  "said",  "there",
    "use",  "an",   "each",  "which", "she",   "do",    "how",  "their", "if",     "will", "up",   "other", "about",
    "out",  "many", "then",  "them",  "these", "so",    "some", "her",   "would",  "make", "like", "him",   "into",
    "time", "has",  "look",  "two",   "more",  "write", "go",   "see",   "number", "no",   "way",  "could", "people",
    "my",   "than", "first", "water", "been",  "call",  "who",  "oil",   "its",    "now",  "find", "long",  "down",
    "day",  "did",  "get",   "come",  "made",  "may",   "part"};

int scaled_length(int length, double ratio, std::mt19937_64& rng) {
  if (ratio <= 0) return length;
  int low = std::max(1, static_cast<int>(length * (1.0 - ratio)));
  int high = std::max(low, static_cast<int>(length * (1.0 + ratio)));
  return std::uniform_int_distribution<int>(low, high)(rng);
}

}  // namespace

std::vector<DatasetEntry> random_dataset(const RandomDatasetOptions& options, int num_prompts, uint64_t seed) {
  if (options.input_len < 1) throw_error(ErrorCode::kInvalidArgument, "--random-input-len must be at least 1");
  if (options.output_len < 1) throw_error(ErrorCode::kInvalidArgument, "--random-output-len must be at least 1");
  if (options.range_ratio < 0 || options.range_ratio >= 1) {
    throw_error(ErrorCode::kInvalidArgument, "--random-range-ratio must be in [0, 1), got {}", options.range_ratio);
  }
  if (options.vocab_size < 1) throw_error(ErrorCode::kInvalidArgument, "--random-vocab-size must be at least 1");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> token(0, options.vocab_size - 1);
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  std::vector<DatasetEntry> entries;
  for (int i = 0; i < num_prompts; ++i) {
    DatasetEntry entry;
    entry.prompt_len = scaled_length(options.input_len, options.range_ratio, rng);
    entry.output_len = scaled_length(options.output_len, options.range_ratio, rng);
    if (options.format == PromptFormat::kTokenIds) {
      std::vector<int> ids(entry.prompt_len);
      for (int& id : ids) id = token(rng);
      entry.prompt = ids;
    } else {
      std::string text;
      for (int w = 0; w < entry.prompt_len; ++w) {
        if (w) text += ' ';
        text += kWords[word(rng)];
      }
      entry.prompt = text;
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<DatasetEntry> jsonl_dataset(const std::filesystem::path& path, int num_prompts, int default_output_len) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "--dataset-path {}: cannot open the file", path.string());
  std::vector<DatasetEntry> lines;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string where = fmt::format("{}:{}", path.string(), line_no);
    Json json = parse_json(line, where);
    if (!json.is_object()) throw_error(ErrorCode::kInvalidArgument, "{}: each line must be a JSON object", where);
    DatasetEntry entry;
    if (json.contains("messages")) {
      if (!json["messages"].is_array())
        throw_error(ErrorCode::kInvalidArgument, "{}: 'messages' must be a list", where);
      entry.prompt = json["messages"];
      entry.is_chat_messages = true;
    } else if (json.contains("prompt") && (json["prompt"].is_string() || json["prompt"].is_array())) {
      entry.prompt = json["prompt"];
      if (entry.prompt.is_array()) entry.prompt_len = static_cast<int>(entry.prompt.size());
    } else {
      throw_error(ErrorCode::kInvalidArgument, "{}: needs 'prompt' (text or token ids) or 'messages'", where);
    }
    entry.output_len = json.value("output_len", default_output_len);
    if (entry.output_len < 1) throw_error(ErrorCode::kInvalidArgument, "{}: 'output_len' must be at least 1", where);
    lines.push_back(std::move(entry));
  }
  if (lines.empty())
    throw_error(ErrorCode::kInvalidArgument, "--dataset-path {}: no prompts in the file", path.string());
  std::vector<DatasetEntry> entries;
  for (int i = 0; i < num_prompts; ++i) entries.push_back(lines[i % lines.size()]);
  return entries;
}

namespace {

Json speech_body(const DatasetEntry& entry, const RequestShape& shape, size_t index) {
  if (entry.is_chat_messages || !entry.prompt.is_string()) {
    throw_error(ErrorCode::kInvalidArgument,
                "/v1/audio/speech needs text prompts (the text to speak); use --prompt-format text or a dataset of "
                "texts");
  }
  Json body = {{"model", shape.model},     {"input", entry.prompt},
               {"stream", true},           {"stream_format", shape.stream == StreamKind::kSpeechSse ? "sse" : "audio"},
               {"response_format", "wav"}, {"max_new_tokens", entry.output_len}};
  if (!shape.voice.empty()) body["voice"] = shape.voice;
  if (shape.ignore_eos) body["ignore_eos"] = true;
  if (!shape.clones.empty()) body.update(shape.clones[index % shape.clones.size()]);
  return body;
}

std::string audio_mime_type(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".wav") return "audio/wav";
  if (ext == ".mp3") return "audio/mpeg";
  if (ext == ".flac") return "audio/flac";
  if (ext == ".ogg" || ext == ".opus") return "audio/ogg";
  return "application/octet-stream";
}

}  // namespace

Json voice_clone_fields(const std::filesystem::path& ref_audio, const std::string& ref_text) {
  std::ifstream in(ref_audio, std::ios::binary);
  if (!in) throw_error(ErrorCode::kInvalidArgument, "--ref-audio {}: cannot read the file", ref_audio.string());
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  if (bytes.empty()) throw_error(ErrorCode::kInvalidArgument, "--ref-audio {}: the file is empty", ref_audio.string());
  Json fields = {{"task_type", "Base"},
                 {"ref_audio", "data:" + audio_mime_type(ref_audio) + ";base64," + base64_encode(bytes)}};
  if (ref_text.empty()) {
    fields["x_vector_only_mode"] = true;
  } else {
    fields["ref_text"] = ref_text;
  }
  return fields;
}

BenchRequest make_request(const DatasetEntry& entry, const RequestShape& shape, size_t index) {
  if (shape.stream == StreamKind::kSpeechAudio || shape.stream == StreamKind::kSpeechSse) {
    Json body = speech_body(entry, shape, index);
    body.update(shape.extra_body);
    return {body.dump(), entry.prompt_len, entry.output_len};
  }
  Json body = {
      {"model", shape.model}, {"stream", true}, {"stream_options", {{"include_usage", true}}}, {"temperature", 0.0}};
  if (shape.ignore_eos) body["ignore_eos"] = true;
  if (shape.stream == StreamKind::kChat) {
    if (entry.is_chat_messages) {
      body["messages"] = entry.prompt;
    } else if (entry.prompt.is_string()) {
      body["messages"] = Json::array({{{"role", "user"}, {"content", entry.prompt}}});
    } else {
      throw_error(ErrorCode::kInvalidArgument,
                  "/v1/chat/completions needs text prompts; use --prompt-format text or a dataset of texts");
    }
    body["max_completion_tokens"] = entry.output_len;
    if (!shape.modalities.empty()) body["modalities"] = shape.modalities;
    if (!shape.chat_audio.empty()) body["audio"] = shape.chat_audio;
  } else {
    if (entry.is_chat_messages) {
      throw_error(ErrorCode::kInvalidArgument, "a dataset of chat 'messages' needs --endpoint /v1/chat/completions");
    }
    body["prompt"] = entry.prompt;
    body["max_tokens"] = entry.output_len;
  }
  body.update(shape.extra_body);
  return {body.dump(), entry.prompt_len, entry.output_len};
}

}  // namespace omni::cli::bench
