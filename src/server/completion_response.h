// The response side that POST /v1/completions and POST /v1/chat/completions share: one
// GenerationRun over the route's backend requests, each backend event folded into its choice
// (choice = prompt_index * n + event.index, as in vLLM), usage summed over the prompts, and the
// response in the route's OpenAI shape — SSE chunks while streaming (then the error event or the
// usage chunk, then [DONE]) or one JSON body at the end. An error event aborts the request's other
// backend requests and becomes the response (or the stream's last event).
//
// Chat with audio output (a request with several outputs, ResponseEvent::modality), as vLLM-Omni
// answers it: not streamed, the text choices come first, then one audio choice (index 0, the
// choice it speaks) whose message has content null and `audio` (chat_audio.h); streamed, text
// deltas are chunks with modality "text" and each audio event is a chunk with modality "audio"
// whose delta is {role, content: base64 of that piece as a file of its own}. A choice's
// finish_reason goes out once, on the chunk of the output that finishes last. The completions API
// reads the text output only.
//
// Threads: start() runs in a route handler, on the connection's executor, which also runs every
// later step (GenerationRun's callbacks).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "media/audio_encoder.h"
#include "runtime/serving_backend.h"
#include "server/http.h"
#include "server/request_fields.h"
#include "server/serving_context.h"

namespace omni::server {

enum class CompletionApi {
  kText,  // text_completion: choices[].text, logprobs {tokens, token_logprobs, top_logprobs, text_offset}
  kChat,  // chat.completion(.chunk): choices[].message / delta, logprobs {content}; chunks carry modality "text"
};

struct StreamOptions {
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats
};

// `stream` and `stream_options`; InvalidField when stream_options comes without stream.
StreamOptions read_stream_options(const FieldReader& fields);

struct CompletionResponseSpec {
  CompletionApi api = CompletionApi::kText;
  std::string id;     // cmpl-… / chatcmpl-…
  std::string model;  // the served name the response reports
  StreamOptions stream;
  int64_t n = 1;          // choices per prompt
  bool logprobs = false;  // the request asked for logprobs
  // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N" rather than by their text.
  bool tokens_as_ids = false;
  std::vector<std::string> echo;  // text only, per prompt: text put before the choice's output
  // Chat: whether the request delivers text (a stream then opens with the assistant role chunks),
  // and the format its audio output is encoded in.
  bool text_output = true;
  media::AudioFormat audio_format = media::AudioFormat::kWav;
};

// The spec's fields that come from the request: stream options, n and logprobs (from the
// sampling parameters the route derived), return_tokens_as_token_ids. InvalidField as
// read_stream_options.
CompletionResponseSpec response_spec_from_request(CompletionApi api, std::string model, const FieldReader& fields,
                                                  const Json& sampling_params);

// Submits `requests` (one per prompt; their `n` choices each) and answers through `responder`.
// Throws what GenerationRun::start throws (the handler answers it as an HTTP error).
void start_completion_response(const ServingContext& context, const HttpRequest& request,
                               const std::shared_ptr<Responder>& responder,
                               std::vector<runtime::GenerationRequest> requests, CompletionResponseSpec spec);

}  // namespace omni::server
