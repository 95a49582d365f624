#include "fuzz_backend.h"

#include <algorithm>

namespace omni::fuzz {

namespace {

int integer_field(const Json& params, const char* name, int fallback, int low, int high) {
  auto it = params.find(name);
  if (it == params.end() || !it->is_number_integer()) return fallback;
  return static_cast<int>(std::clamp<int64_t>(it->get<int64_t>(), low, high));
}

}  // namespace

void FuzzBackend::submit(runtime::GenerationRequest request, runtime::EventSink sink) {
  pending_.push_back({std::move(request), std::move(sink)});
}

void FuzzBackend::abort(const std::string& request_id) {
  for (Pending& p : pending_) {
    if (p.request.request_id == request_id) p.aborted = true;
  }
}

void FuzzBackend::deliver() {
  std::vector<Pending> now;
  now.swap(pending_);
  for (Pending& p : now) {
    const Json& params = p.request.sampling_params;
    const int n = integer_field(params, "n", 1, 1, 128);
    const int logprobs = params.contains("logprobs") ? integer_field(params, "logprobs", 0, 0, 20) : -1;
    const bool speech = p.request.additional_information.contains("text");
    const bool image = std::find(p.request.output_modalities.begin(), p.request.output_modalities.end(), "image") !=
                       p.request.output_modalities.end();
    const int prompt_tokens = static_cast<int>(p.request.prompt_token_ids.size());
    for (int choice = 0; choice < n; ++choice) {
      runtime::ResponseEvent event;
      event.index = choice;
      event.prompt_tokens = prompt_tokens;
      if (p.aborted) {
        event.finish_reason = "abort";
      } else if (image) {
        // A 2x2 image whatever size was asked for: the stage checks sizes, the route only formats.
        event.image = runtime::GeneratedImage{2, 2, std::vector<uint8_t>(2 * 2 * 3, 128), 1, 0.0};
        event.finish_reason = "stop";
      } else if (speech) {
        event.audio.assign(480, 0.25f);
        event.audio_sample_rate = 24000;
        event.finish_reason = "stop";
      } else {
        event.token_ids = {100, 200};
        event.text = "ab";
        if (logprobs >= 0) {
          for (int32_t id : event.token_ids) {
            runtime::GeneratedTokenLogprobs entry{{id, -0.5f}, 1, {}};
            for (int k = 0; k < logprobs; ++k) entry.top.push_back({id + k, -0.5f - static_cast<float>(k)});
            event.logprobs.push_back(entry);
          }
        }
        event.finish_reason = "stop";
      }
      event.completion_tokens = static_cast<int>(event.token_ids.size()) * (choice + 1);
      event.finished = choice == n - 1;
      p.sink(std::move(event));
    }
  }
}

}  // namespace omni::fuzz
