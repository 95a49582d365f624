#include "server/scripted_backend.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace omni::testing {

ScriptedBackend::ScriptedBackend(ScriptedBackendOptions options) : options_(options) {
  worker_ = std::thread([this] { loop(); });
}

ScriptedBackend::~ScriptedBackend() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void ScriptedBackend::submit(runtime::GenerationRequest request, runtime::EventSink sink) {
  std::lock_guard lock(mutex_);
  if (submit_error_) throw *submit_error_;
  if (live_.count(request.request_id)) {
    throw_error(ErrorCode::kInvalidArgument, "request id {} is already live", request.request_id);
  }
  Live live;
  live.sink = std::move(sink);
  const Json& params = request.sampling_params;
  live.has_max_tokens = params.contains("max_tokens");
  live.max_tokens = live.has_max_tokens ? params["max_tokens"].get<int>() : options_.default_output_tokens;
  live.n = params.value("n", 1);
  if (params.contains("logprobs")) live.logprobs = params["logprobs"].get<int>();
  live.fail = fail_error_;
  live.fail_after = fail_after_;
  live.due = std::chrono::steady_clock::now() + options_.first_token_delay;
  const auto& modalities = request.output_modalities;
  live.audio = std::find(modalities.begin(), modalities.end(), "audio") != modalities.end();
  live.text = !live.audio || std::find(modalities.begin(), modalities.end(), "text") != modalities.end();
  live.request = request;
  submitted_.push_back(request);
  std::string id = request.request_id;
  live_.emplace(id, std::move(live));
  peak_ = std::max(peak_, static_cast<int>(live_.size()) + (stepping_id_ ? 1 : 0));
  changed_.notify_all();
}

void ScriptedBackend::abort(const std::string& request_id) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(request_id);
  if (it == live_.end()) {
    if (stepping_id_ == request_id) {
      aborted_.push_back(request_id);
      stepping_aborted_ = true;
    }
    return;
  }
  aborted_.push_back(request_id);
  it->second.aborted = true;
  it->second.due = std::chrono::steady_clock::now();
  changed_.notify_all();
}

bool ScriptedBackend::healthy() const {
  std::lock_guard lock(mutex_);
  return healthy_;
}

void ScriptedBackend::set_healthy(bool healthy) {
  std::lock_guard lock(mutex_);
  healthy_ = healthy;
}

void ScriptedBackend::fail_submits(std::optional<Error> error) {
  std::lock_guard lock(mutex_);
  submit_error_ = std::move(error);
}

void ScriptedBackend::fail_after_tokens(int tokens, std::optional<Error> error) {
  std::lock_guard lock(mutex_);
  fail_after_ = tokens;
  fail_error_ = std::move(error);
}

std::vector<runtime::GenerationRequest> ScriptedBackend::submitted() const {
  std::lock_guard lock(mutex_);
  return submitted_;
}

std::vector<std::string> ScriptedBackend::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

int ScriptedBackend::live_requests() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(live_.size()) + (stepping_id_ ? 1 : 0);
}

int ScriptedBackend::peak_live_requests() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

bool ScriptedBackend::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return live_.empty() && !stepping_id_; });
}

std::vector<float> ScriptedBackend::audio_samples(int count) {
  std::vector<float> samples(count);
  for (int i = 0; i < count; ++i) {
    samples[i] = static_cast<float>(0.5 * std::sin(2 * std::numbers::pi * 440.0 * i / kScriptedAudioSampleRate));
  }
  return samples;
}

bool ScriptedBackend::step(Live& live) {
  int prompt_tokens = static_cast<int>(live.request.prompt_token_ids.size());
  auto base = [&] {
    runtime::ResponseEvent event;
    event.prompt_tokens = prompt_tokens;
    event.completion_tokens = live.emitted * live.n;
    return event;
  };
  if (live.aborted) {
    runtime::ResponseEvent event = base();
    event.finish_reason = "abort";
    event.finished = true;
    live.sink(std::move(event));
    return true;
  }
  if (live.fail && live.emitted >= live.fail_after) {
    runtime::ResponseEvent event = base();
    event.error = live.fail;
    event.finished = true;
    live.sink(std::move(event));
    return true;
  }
  const bool text_done_before = !live.text || live.emitted >= live.max_tokens;
  const bool audio_done_before = !live.audio || live.audio_emitted >= options_.audio_chunks;
  if (!text_done_before) ++live.emitted;
  if (!audio_done_before) ++live.audio_emitted;
  const bool text_done = !live.text || live.emitted >= live.max_tokens;
  const bool audio_done = !live.audio || live.audio_emitted >= options_.audio_chunks;
  for (int choice = 0; choice < live.n && !text_done_before; ++choice) {
    runtime::ResponseEvent event = base();
    if (live.audio) {
      event.modality = "text";
      event.stage_id = 0;
    }
    event.completion_tokens = (live.emitted - 1) * live.n + choice + 1;
    event.index = choice;
    int32_t token = 'a' + (live.emitted - 1) % 26;
    event.token_ids = {token};
    event.text = std::string(1, static_cast<char>(token));
    if (live.logprobs) {
      // The k-th generated token has logprob -k/4; its alternatives are the next letters, each
      // one nat less likely.
      runtime::GeneratedTokenLogprobs logprobs;
      float logprob = -0.25f * static_cast<float>(live.emitted);
      logprobs.token = {token, logprob};
      logprobs.rank = 1;
      for (int k = 0; k < *live.logprobs; ++k) logprobs.top.push_back({token + k, logprob - static_cast<float>(k)});
      event.logprobs.push_back(std::move(logprobs));
    }
    if (text_done) {
      event.finish_reason = live.has_max_tokens ? "length" : "stop";
      event.output_finished = choice == live.n - 1;
      // In a step that ends both outputs the audio's event comes last.
      event.finished = event.output_finished && audio_done_before;
    }
    live.sink(std::move(event));
  }
  if (!audio_done_before) {
    runtime::ResponseEvent event = base();
    event.modality = "audio";
    event.stage_id = 2;
    const int samples = options_.audio_chunk_samples;
    std::vector<float> all = audio_samples(live.audio_emitted * samples);
    event.audio.assign(all.end() - samples, all.end());
    event.audio_sample_rate = kScriptedAudioSampleRate;
    if (audio_done) {
      event.finish_reason = "stop";
      event.output_finished = true;
      event.finished = text_done;
    }
    live.sink(std::move(event));
  }
  return text_done && audio_done;
}

void ScriptedBackend::loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (live_.empty()) {
      changed_.wait(lock);
      continue;
    }
    auto next = std::min_element(live_.begin(), live_.end(),
                                 [](const auto& a, const auto& b) { return a.second.due < b.second.due; });
    auto now = std::chrono::steady_clock::now();
    if (next->second.due > now) {
      changed_.wait_until(lock, next->second.due);
      continue;
    }
    // Sinks run without the lock, as a real backend's would, so the server may call abort().
    Live live = std::move(next->second);
    std::string id = next->first;
    live_.erase(next);
    stepping_id_ = id;
    stepping_aborted_ = false;
    lock.unlock();
    bool finished = step(live);
    lock.lock();
    if (!finished) {
      live.due = std::chrono::steady_clock::now() + options_.token_delay;
      // An abort that arrived during the step: the next step ends the request.
      if (stepping_aborted_) {
        live.aborted = true;
        live.due = std::chrono::steady_clock::now();
      }
      live_.emplace(id, std::move(live));
    }
    stepping_id_.reset();
    changed_.notify_all();
  }
}

}  // namespace omni::testing
