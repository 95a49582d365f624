// What the OpenAI route handlers share: the backend, the tokenizer/template, the served model's
// identity and the request metrics. Owned by ApiServer; read-only after construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "runtime/serving_backend.h"
#include "server/chat_media.h"
#include "server/inflight_limit.h"
#include "server/prompt_renderer.h"
#include "server/request_metrics.h"

namespace omni::server {

struct ServingContext {
  runtime::ServingBackend& backend;
  // Null when the server runs without a tokenizer: text prompts and chat are then refused and
  // only token-id prompts are served.
  const PromptRenderer* renderer;
  std::vector<std::string> served_model_names;  // the first is the name responses report
  std::string model_path;
  int max_model_len;
  std::string version;
  RequestMetrics& metrics;
  std::string pipeline;                          // the served pipeline's name
  std::vector<std::string> output_modalities;    // what its final-output stages produce
  std::vector<std::string> unserved_modalities;  // what its stages that are not served would produce
  // The bound on backend requests in flight (GenerationRun takes and returns the places); null: none.
  InflightLimit* inflight = nullptr;
  // How chat media parts are read (the model's audio input rate, the limits); null: no media.
  const ChatMediaOptions* media = nullptr;
  // The checkpoint's built-in speakers (a chat's audio.voice must be one); empty: any voice passes.
  std::vector<std::string> voices;

  // Throws InvalidField("modalities") naming the pipeline and what it produces when `modalities`
  // asks for a modality no final-output stage of the pipeline produces.
  void check_output_modalities(const std::vector<std::string>& modalities) const;

  // The served name the request asks for: its `model` field when that is one of the served
  // names, the first served name when the field is absent. Throws Error(kNotFound) for a model
  // this server does not serve (404), naming it and the served names.
  std::string resolve_model(const Json& body) const;
  // The renderer, or Error(kUnsupported) naming `what` needs it when there is none.
  const PromptRenderer& require_renderer(std::string_view what) const;
  // Throws InvalidField(field) naming both numbers when a prompt of `prompt_tokens` tokens, with
  // `max_tokens` to generate (when given), does not fit in max_model_len; nothing when
  // max_model_len is not known here (0: the engine checks it then).
  void check_context_length(size_t prompt_tokens, std::optional<int64_t> max_tokens, const std::string& field) const;
  // Throws InvalidField(field) when a token id is outside [0, vocab_size).
  void check_token_ids(const std::vector<int32_t>& token_ids, const std::string& field) const;
};

// "cmpl-" + 32 random hex digits, like vLLM's request ids.
std::string random_request_id(std::string_view prefix);

}  // namespace omni::server
