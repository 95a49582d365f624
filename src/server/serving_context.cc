#include "server/serving_context.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <random>

#include "server/openai_error.h"
#include "server/request_fields.h"

namespace omni::server {

std::string ServingContext::resolve_model(const Json& body) const {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return served_model_names.front();
  if (!it->is_string()) throw_invalid_field("model", "'model' must be a string, got {}", brief(*it));
  const std::string& name = it->get_ref<const std::string&>();
  if (std::find(served_model_names.begin(), served_model_names.end(), name) == served_model_names.end()) {
    std::string served;
    for (const auto& served_name : served_model_names) served += (served.empty() ? "" : ", ") + served_name;
    throw_error(ErrorCode::kNotFound, "The model `{}` does not exist. This server serves: {}", name, served);
  }
  return name;
}

const PromptRenderer& ServingContext::require_renderer(std::string_view what) const {
  if (!renderer) throw_error(ErrorCode::kUnsupported, "{} needs a tokenizer, and this server runs without one", what);
  return *renderer;
}

void ServingContext::check_context_length(size_t prompt_tokens, std::optional<int64_t> max_tokens,
                                          const std::string& field) const {
  if (max_model_len <= 0) return;
  const auto limit = static_cast<size_t>(max_model_len);
  if (prompt_tokens > limit) {
    throw_invalid_field(field, "the prompt of '{}' has {} tokens, more than this model's max_model_len of {}", field,
                        prompt_tokens, max_model_len);
  }
  if (max_tokens && prompt_tokens + static_cast<size_t>(*max_tokens) > limit) {
    throw_invalid_field("max_tokens",
                        "this model's max_model_len is {} tokens, but the request asks for {} ({} in the prompt of "
                        "'{}', {} to generate); shorten the prompt or lower 'max_tokens'",
                        max_model_len, prompt_tokens + static_cast<size_t>(*max_tokens), prompt_tokens, field,
                        *max_tokens);
  }
}

void ServingContext::check_token_ids(const std::vector<int32_t>& token_ids, const std::string& field) const {
  if (!renderer) return;
  int32_t vocab = renderer->vocab_size();
  for (size_t i = 0; i < token_ids.size(); ++i) {
    if (token_ids[i] < 0 || token_ids[i] >= vocab) {
      throw_invalid_field(field, "token id {} at position {} of '{}' is outside the vocabulary [0, {})", token_ids[i],
                          i, field, vocab);
    }
  }
}

void ServingContext::check_output_modalities(const std::vector<std::string>& modalities) const {
  for (const std::string& modality : modalities) {
    if (std::find(output_modalities.begin(), output_modalities.end(), modality) != output_modalities.end()) continue;
    if (std::find(unserved_modalities.begin(), unserved_modalities.end(), modality) != unserved_modalities.end()) {
      throw_invalid_field("modalities",
                          "'modalities' asks for {}, but pipeline '{}' is served without the stages that produce it "
                          "(omnistage has no stage model for them yet): it produces {}",
                          modality, pipeline, fmt::join(output_modalities, ", "));
    }
    throw_invalid_field("modalities",
                        "'modalities' asks for {}, but pipeline '{}' has no stage with final_output_type {}: it "
                        "produces {}",
                        modality, pipeline, modality, fmt::join(output_modalities, ", "));
  }
}

std::string random_request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

}  // namespace omni::server
