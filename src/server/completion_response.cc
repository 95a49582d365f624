#include "server/completion_response.h"

#include <optional>

#include "base/base64.h"
#include "base/utf8.h"
#include "server/chat_audio.h"
#include "server/generation.h"
#include "server/logprobs_format.h"
#include "server/openai_error.h"
#include "server/openai_format.h"

namespace omni::server {
namespace {

struct Choice {
  std::string text;
  std::optional<std::string> finish_reason;
  bool echoed = false;
  Json chat_logprobs = Json::array();
  CompletionLogprobs text_logprobs;
};

// A request's audio output, for the non-streamed audio choice.
struct AudioOutput {
  bool seen = false;  // an audio event arrived
  std::vector<float> samples;
  int sample_rate = 0;
  std::optional<std::string> finish_reason;
};

// The sample rate of an audio output that ended without any samples (Qwen3-Omni's codec rate), so
// that even empty audio is a well-formed file.
constexpr int kDefaultAudioSampleRate = 24000;

// A streamed chunk's finish_reason: a choice finishes once, with the output that ends last, so the
// last event of an output that ends while another still runs carries none.
std::optional<std::string> streamed_finish_reason(const runtime::ResponseEvent& event) {
  if (event.output_finished && !event.finished) return std::nullopt;
  return event.finish_reason;
}

// The state of one response, touched only on the connection's executor.
class CompletionResponse {
 public:
  CompletionResponse(const ServingContext& context, std::shared_ptr<Responder> responder, CompletionResponseSpec spec,
                     size_t prompts)
      : context_(context),
        responder_(std::move(responder)),
        spec_(std::move(spec)),
        choices_(prompts * static_cast<size_t>(spec_.n)),
        prompt_tokens_(prompts, 0),
        completion_tokens_(prompts, 0) {}

  std::shared_ptr<GenerationRun> run;

  void set_prompt_tokens(size_t prompt_index, int64_t tokens) { prompt_tokens_[prompt_index] = tokens; }
  bool streaming() const { return spec_.stream.stream; }

  void start_stream() {
    responder_->start_stream(200, kSseContentType, {{"Cache-Control", "no-cache"}});
    if (spec_.api != CompletionApi::kChat || !spec_.text_output) return;
    for (size_t i = 0; i < choices_.size(); ++i) {
      Json delta = {{"role", "assistant"}, {"content", ""}};
      responder_->write(sse_event(chunk(Json::array(
          {{{"index", i}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}))));
    }
  }

  void on_event(size_t prompt_index, const runtime::ResponseEvent& event) {
    prompt_tokens_[prompt_index] = event.prompt_tokens;
    completion_tokens_[prompt_index] = event.completion_tokens;
    if (event.error) {
      if (!error_) error_ = event.error;
      run->abort_all();
      return;
    }
    if (event.modality == "audio") {
      if (spec_.api == CompletionApi::kChat) on_audio(prompt_index, event);
      return;
    }
    size_t index = prompt_index * static_cast<size_t>(spec_.n) + static_cast<size_t>(event.index);
    if (event.index < 0 || event.index >= spec_.n) {
      throw_error(ErrorCode::kInternal, "backend reported choice {} of a request with n={}", event.index, spec_.n);
    }
    Choice& choice = choices_[index];
    std::string text = event.text;
    if (!spec_.echo.empty() && !choice.echoed) {
      choice.echoed = true;
      text = spec_.echo[prompt_index] + text;
      choice.text_logprobs = CompletionLogprobs(code_points(spec_.echo[prompt_index]));
    }
    choice.text += text;
    if (event.finish_reason) choice.finish_reason = event.finish_reason;

    Json logprobs = nullptr;
    if (spec_.logprobs) {
      if (spec_.api == CompletionApi::kChat) {
        Json content = chat_logprobs_content(event.logprobs, token_renderer());
        for (const Json& entry : content) choice.chat_logprobs.push_back(entry);
        logprobs = {{"content", std::move(content)}};
      } else {
        CompletionLogprobs delta(choice.text_logprobs.next_text_offset());
        delta.append(event.logprobs, token_renderer());
        choice.text_logprobs.append(event.logprobs, token_renderer());
        logprobs = delta.to_json();
      }
    }
    if (!spec_.stream.stream || error_) return;
    const std::optional<std::string> finish_reason = streamed_finish_reason(event);
    if (text.empty() && !finish_reason && event.logprobs.empty()) return;
    Json entry = {{"index", index}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}};
    if (spec_.api == CompletionApi::kChat) {
      entry["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
    } else {
      entry["text"] = text;
    }
    if (finish_reason) entry["finish_reason"] = *finish_reason;
    responder_->write(sse_event(chunk(Json::array({std::move(entry)}))));
  }

  void on_audio(size_t prompt_index, const runtime::ResponseEvent& event) {
    if (!audio_.seen) {
      audio_.seen = true;
      audio_.sample_rate = event.audio_sample_rate > 0 ? event.audio_sample_rate : kDefaultAudioSampleRate;
    }
    if (event.finish_reason) audio_.finish_reason = event.finish_reason;
    if (!spec_.stream.stream) {
      audio_.samples.insert(audio_.samples.end(), event.audio.begin(), event.audio.end());
      return;
    }
    if (error_) return;
    const std::optional<std::string> finish_reason = streamed_finish_reason(event);
    if (event.audio.empty() && !finish_reason) return;
    std::string piece = event.audio.empty()
                            ? ""
                            : base64_encode(encode_audio_file(spec_.audio_format, event.audio, audio_.sample_rate));
    const size_t index = prompt_index * static_cast<size_t>(spec_.n) + static_cast<size_t>(event.index);
    Json entry = {{"index", index},
                  {"delta", {{"role", "assistant"}, {"content", std::move(piece)}}},
                  {"logprobs", nullptr},
                  {"finish_reason", finish_reason ? Json(*finish_reason) : Json(nullptr)}};
    responder_->write(sse_event(chunk(Json::array({std::move(entry)}), "audio")));
  }

  void on_finished() {
    if (spec_.stream.stream) {
      if (error_) responder_->write(sse_event(error_json(*error_)));
      if (spec_.stream.include_usage && !error_) {
        Json last = chunk(Json::array());
        last["usage"] = usage();
        responder_->write(sse_event(last));
      }
      responder_->write(kSseDone);
      responder_->end_stream();
      return;
    }
    if (error_) return responder_->respond(error_response(*error_));
    Json choices = Json::array();
    for (size_t i = 0; i < choices_.size() && spec_.text_output; ++i) {
      const Choice& choice = choices_[i];
      Json entry = {{"index", i},
                    {"logprobs", nullptr},
                    {"finish_reason", choice.finish_reason ? Json(*choice.finish_reason) : Json(nullptr)}};
      if (spec_.api == CompletionApi::kChat) {
        entry["message"] = {{"role", "assistant"}, {"content", choice.text}};
        if (spec_.logprobs) entry["logprobs"] = {{"content", choice.chat_logprobs}};
      } else {
        entry["text"] = choice.text;
        if (spec_.logprobs) entry["logprobs"] = choice.text_logprobs.to_json();
      }
      choices.push_back(std::move(entry));
    }
    if (audio_.seen) choices.push_back(audio_choice());
    responder_->respond(
        json_response({{"id", spec_.id},
                       {"object", spec_.api == CompletionApi::kChat ? "chat.completion" : "text_completion"},
                       {"created", created_},
                       {"model", spec_.model},
                       {"choices", std::move(choices)},
                       {"usage", usage()}}));
  }

 private:
  // Null (tokens named by id) when asked for, or when the server has no tokenizer.
  const PromptRenderer* token_renderer() const { return spec_.tokens_as_ids ? nullptr : context_.renderer; }

  Json usage() const {
    int64_t prompt = 0;
    int64_t completion = 0;
    for (size_t i = 0; i < prompt_tokens_.size(); ++i) {
      prompt += prompt_tokens_[i];
      completion += completion_tokens_[i];
    }
    return usage_json(prompt, completion);
  }

  // The audio output as vLLM-Omni's chat answers it: a choice of its own, its index the one it
  // speaks for (0).
  Json audio_choice() const {
    const std::string file = encode_audio_file(spec_.audio_format, audio_.samples, audio_.sample_rate);
    return {{"index", 0},
            {"message", {{"role", "assistant"}, {"content", nullptr}, {"audio", chat_message_audio(file)}}},
            {"logprobs", nullptr},
            {"finish_reason", audio_.finish_reason ? Json(*audio_.finish_reason) : Json(nullptr)}};
  }

  Json chunk(Json choices, const char* modality = "text") const {
    bool chat = spec_.api == CompletionApi::kChat;
    Json out = {{"id", spec_.id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", spec_.model},
                {"choices", std::move(choices)}};
    if (chat) out["modality"] = modality;
    if (spec_.stream.include_usage) out["usage"] = spec_.stream.continuous_usage ? usage() : Json(nullptr);
    return out;
  }

  const ServingContext& context_;
  std::shared_ptr<Responder> responder_;
  const CompletionResponseSpec spec_;
  const int64_t created_ = unix_seconds();
  std::vector<Choice> choices_;
  AudioOutput audio_;
  std::vector<int64_t> prompt_tokens_;      // per prompt, as the backend reports
  std::vector<int64_t> completion_tokens_;  // per prompt, over its choices
  std::optional<Error> error_;
};

}  // namespace

StreamOptions read_stream_options(const FieldReader& fields) {
  StreamOptions options;
  options.stream = fields.boolean("stream").value_or(false);
  if (const Json* stream_options = fields.object("stream_options")) {
    if (!options.stream) {
      throw_invalid_field("stream_options", "'stream_options' can only be given when 'stream' is true");
    }
    FieldReader option_fields(*stream_options, "stream_options.");
    options.include_usage = option_fields.boolean("include_usage").value_or(false);
    options.continuous_usage = option_fields.boolean("continuous_usage_stats").value_or(false);
  }
  return options;
}

CompletionResponseSpec response_spec_from_request(CompletionApi api, std::string model, const FieldReader& fields,
                                                  const Json& sampling_params) {
  CompletionResponseSpec spec;
  spec.api = api;
  spec.model = std::move(model);
  spec.stream = read_stream_options(fields);
  spec.n = sampling_params.value("n", int64_t{1});
  spec.logprobs = sampling_params.contains("logprobs");
  spec.tokens_as_ids = fields.boolean("return_tokens_as_token_ids").value_or(false);
  return spec;
}

void start_completion_response(const ServingContext& context, const HttpRequest& request,
                               const std::shared_ptr<Responder>& responder,
                               std::vector<runtime::GenerationRequest> requests, CompletionResponseSpec spec) {
  auto response = std::make_shared<CompletionResponse>(context, responder, std::move(spec), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    response->set_prompt_tokens(i, static_cast<int64_t>(requests[i].prompt_token_ids.size()));
  }
  bool stream = response->streaming();
  for (runtime::GenerationRequest& generation : requests) generation.stream = stream;
  response->run = GenerationRun::start(
      context, responder, std::move(requests),
      {[response](size_t index, const runtime::ResponseEvent& event) { response->on_event(index, event); },
       [response] {
         response->on_finished();
         response->run.reset();  // breaks the cycle response -> run -> callbacks -> response
       }},
      request.received_at);
  if (stream) response->start_stream();
}

}  // namespace omni::server
