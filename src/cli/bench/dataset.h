// The prompts of `omnistage bench serve`, turned into OpenAI request bodies: a random dataset
// (token-id or text prompts of a chosen length) or a JSONL file. For /v1/audio/speech a prompt is
// the text to speak and its output length the number of codec frames (max_new_tokens).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "cli/bench/load_runner.h"

namespace omni::cli::bench {

enum class PromptFormat { kTokenIds, kText };

struct RandomDatasetOptions {
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;  // lengths uniform in [len * (1 - r), len * (1 + r)]
  int vocab_size = 32000;    // token ids are drawn from [0, vocab_size)
  PromptFormat format = PromptFormat::kTokenIds;
};

// One prompt before it becomes a request body.
struct DatasetEntry {
  Json prompt;  // a string, a list of token ids, or (chat) a list of messages
  bool is_chat_messages = false;
  int prompt_len = 0;  // tokens when known (token ids), else words
  int output_len = 0;
};

std::vector<DatasetEntry> random_dataset(const RandomDatasetOptions& options, int num_prompts, uint64_t seed);

// One JSON object per line: {"prompt": "text" | [token ids]} or {"messages": [...]}, with an
// optional "output_len" (else `default_output_len`). Lines are reused in order when num_prompts
// exceeds them. Errors name the file and line.
std::vector<DatasetEntry> jsonl_dataset(const std::filesystem::path& path, int num_prompts, int default_output_len);

struct RequestShape {
  std::string model;
  StreamKind stream = StreamKind::kCompletions;  // the endpoint and, for speech, the stream format
  bool ignore_eos = false;
  std::string voice;  // speech: the voice; empty = the server's default
  // Speech: voice-clone fields (voice_clone_fields), request i taking clones[i % size]; empty =
  // no cloning.
  std::vector<Json> clones;
  // Chat: the output modalities asked for ("modalities"; empty: the field is not sent) and OpenAI's
  // `audio` object ({voice, format}; empty: not sent).
  std::vector<std::string> modalities;
  Json chat_audio = Json::object();
  Json extra_body = Json::object();  // merged over the generated fields (top-level keys replace theirs)
};

// The fields of a voice-clone request (task_type Base) for the reference audio file `ref_audio`:
// its bytes inline as a data URL (audio/wav, audio/mpeg, audio/flac or audio/ogg by the file's
// extension, else application/octet-stream: the server decodes any format by content), with
// `ref_text` for in-context cloning, or x_vector_only_mode when `ref_text` is empty. Throws
// Error(kInvalidArgument) naming the file when it cannot be read or is empty.
Json voice_clone_fields(const std::filesystem::path& ref_audio, const std::string& ref_text);

// The streaming request body for `entry`. Throws Error(kInvalidArgument) for a token-id prompt to
// the chat or speech endpoint, or chat messages to another endpoint. Speech requests ask for
// response_format "wav" (the benchmark reads the sample rate from its header). `index` is the
// request's place in the run (it picks the voice-clone reference).
BenchRequest make_request(const DatasetEntry& entry, const RequestShape& shape, size_t index = 0);

}  // namespace omni::cli::bench
