#include "engine/generation_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/error.h"

namespace omni::engine {

namespace {

void expect_chunk_size(const char* what, int frames) {
  if (frames < 1) throw_error(ErrorCode::kInvalidArgument, "{} must be at least 1 frame, got {}", what, frames);
}

// The weight of the latest call in the running estimate of a call's cost: recent calls matter
// most (batch sizes drift with the load), one outlier does not decide alone.
constexpr double kEstimateWeight = 0.5;

}  // namespace

GenerationEngine::GenerationEngine(const model::StreamingAudioDecoder& decoder, AudioChunking chunking, TimeSource now)
    : decoder_(decoder), chunking_(std::move(chunking)), now_(std::move(now)) {
  expect_chunk_size("first_chunk_frames", chunking_.first_chunk_frames);
  expect_chunk_size("chunk_frames", chunking_.chunk_frames);
  if (chunking_.max_batch < 1) {
    throw_error(ErrorCode::kInvalidArgument, "decode_batch_max_size must be at least 1, got {}", chunking_.max_batch);
  }
  limits_.max_batch = chunking_.max_batch;
  limits_.decoder_max_batch = decoder_.max_batch();
  limits_.chunk_frames = chunking_.chunk_frames;
  for (int size : chunking_.batch_sizes) {
    if (size < 1)
      throw_error(ErrorCode::kInvalidArgument, "decode_cudagraph_batch_sizes holds {}, not a batch size", size);
    if (size <= chunking_.max_batch) limits_.batch_sizes.push_back(size);
  }
  std::sort(limits_.batch_sizes.begin(), limits_.batch_sizes.end());
  frame_duration_ = std::chrono::duration_cast<AudioClock::duration>(std::chrono::duration<double>(
      static_cast<double>(decoder_.samples_per_frame()) / static_cast<double>(decoder_.sample_rate())));
}

void GenerationEngine::add_request(const std::string& request_id, std::optional<int> first_chunk_frames,
                                   std::span<const int32_t> context) {
  if (requests_.count(request_id)) {
    throw_error(ErrorCode::kInvalidArgument, "request {} is already running", request_id);
  }
  Request r;
  r.first_chunk_frames = first_chunk_frames.value_or(chunking_.first_chunk_frames);
  expect_chunk_size("first_chunk_frames", r.first_chunk_frames);
  const size_t width = static_cast<size_t>(decoder_.codes_per_frame());
  if (context.size() % width != 0) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: {} context codes are not whole frames of {}", request_id,
                context.size(), width);
  }
  r.stream = context.empty() ? decoder_.open_stream() : stream_after(context);
  r.base_frames = r.stream->frames();
  r.arrival = next_arrival_++;
  requests_.emplace(request_id, std::move(r));
}

void GenerationEngine::add_frames(const std::string& request_id, std::span<const int32_t> codes, bool last) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) throw_error(ErrorCode::kNotFound, "request {} is not running", request_id);
  Request& r = it->second;
  if (r.input_ended) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: frames after the input's last chunk", request_id);
  }
  const size_t width = static_cast<size_t>(decoder_.codes_per_frame());
  if (codes.size() % width != 0) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: {} codes are not whole frames of {}", request_id,
                codes.size(), width);
  }
  r.pending.insert(r.pending.end(), codes.begin(), codes.end());
  r.input_ended = last;
}

void GenerationEngine::abort(const std::string& request_id) { requests_.erase(request_id); }

std::unique_ptr<model::AudioDecoderStream> GenerationEngine::stream_after(std::span<const int32_t> context) {
  const auto started = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  };
  const size_t frames = context.size() / static_cast<size_t>(decoder_.codes_per_frame());
  for (auto it = context_states_.begin(); it != context_states_.end(); ++it) {
    if (!std::equal(context.begin(), context.end(), it->context.begin(), it->context.end())) continue;
    context_states_.splice(context_states_.begin(), context_states_, it);
    ++reused_contexts_;
    std::unique_ptr<model::AudioDecoderStream> copy = decoder_.copy_stream(*it->stream);
    spdlog::debug("generation engine: a kept context of {} frames copied in {:.2f} ms", frames, elapsed_ms());
    return copy;
  }
  std::unique_ptr<model::AudioDecoderStream> stream = decoder_.open_stream();
  std::vector<float> dropped;
  decoder_.decode(*stream, context, dropped);
  spdlog::debug("generation engine: a new context of {} frames decoded in {:.2f} ms ({} kept)", frames, elapsed_ms(),
                context_states_.size());
  if (chunking_.reference_states > 0) {
    if (std::unique_ptr<model::AudioDecoderStream> kept = decoder_.copy_stream(*stream)) {
      context_states_.push_front({std::vector<int32_t>(context.begin(), context.end()), std::move(kept)});
      if (context_states_.size() > static_cast<size_t>(chunking_.reference_states)) context_states_.pop_back();
    }
  }
  return stream;
}

int64_t GenerationEngine::frames_needed(const Request& r) const {
  return r.stream->frames() == r.base_frames ? r.first_chunk_frames : chunking_.chunk_frames;
}

bool GenerationEngine::ready(const Request& r) const {
  const int64_t pending = static_cast<int64_t>(r.pending.size()) / decoder_.codes_per_frame();
  return r.input_ended || pending >= frames_needed(r);
}

bool GenerationEngine::has_ready_work() const {
  return std::any_of(requests_.begin(), requests_.end(), [&](const auto& entry) { return ready(entry.second); });
}

std::vector<AudioOutput> GenerationEngine::step() {
  std::vector<AudioOutput> outputs;
  std::vector<std::map<std::string, Request>::iterator> ready_now;
  std::vector<ChunkCandidate> candidates;
  const int64_t width = decoder_.codes_per_frame();
  for (auto it = requests_.begin(); it != requests_.end(); ++it) {
    const Request& r = it->second;
    if (!ready(r)) continue;
    ready_now.push_back(it);
    ChunkCandidate c;
    c.first = r.stream->frames() == r.base_frames;
    c.frames = std::min(static_cast<int64_t>(r.pending.size()) / width, frames_needed(r));
    c.arrival = r.arrival;
    c.deadline = r.playback_start + (r.stream->frames() - r.base_frames) * frame_duration_;
    c.overtaken = r.overtaken;
    candidates.push_back(c);
  }
  if (ready_now.empty()) return outputs;
  const ChunkCall call = schedule_chunk_call(candidates, now_(), limits_, estimates_);
  std::vector<std::map<std::string, Request>::iterator> batch;
  std::vector<bool> chosen(ready_now.size(), false);
  for (size_t i : call.chosen) {
    batch.push_back(ready_now[i]);
    chosen[i] = true;
  }
  if (call.first_chunks) {
    for (size_t i = 0; i < ready_now.size(); ++i) {
      if (!chosen[i] && !candidates[i].first) ++ready_now[i]->second.overtaken;
    }
  }
  const AudioClock::time_point started = now_();
  decode(batch, outputs);
  const AudioClock::time_point done = now_();
  double& estimate = call.first_chunks ? estimates_.first_call_seconds : estimates_.later_call_seconds;
  const double seconds = std::chrono::duration<double>(done - started).count();
  estimate = estimate == 0 ? seconds : (1 - kEstimateWeight) * estimate + kEstimateWeight * seconds;
  // A call of later chunks pays what the calls of first chunks before it owed: first chunks may go
  // ahead again, so that the two kinds alternate while both wait.
  if (!call.first_chunks) {
    for (auto& [id, r] : requests_) r.overtaken = 0;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (outputs[i].finished) continue;  // decode() dropped the request
    if (candidates[call.chosen[i]].first) {
      batch[i]->second.playback_start = done;
      spdlog::debug("generation engine: request {}: first chunk of {} frames decoded", batch[i]->first,
                    candidates[call.chosen[i]].frames);
    }
  }
  return outputs;
}

void GenerationEngine::decode(const std::vector<std::map<std::string, Request>::iterator>& batch,
                              std::vector<AudioOutput>& outputs) {
  const int64_t width = decoder_.codes_per_frame();
  const size_t first_output = outputs.size();
  std::vector<model::AudioDecodeItem> items;
  std::vector<int64_t> frames;
  for (auto it : batch) {
    Request& r = it->second;
    const int64_t pending = static_cast<int64_t>(r.pending.size()) / width;
    // One chunk of the configured size; at the end of the input, everything that is left.
    frames.push_back(std::min(pending, frames_needed(r)));
    AudioOutput out;
    out.request_id = it->first;
    outputs.push_back(std::move(out));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& r = batch[i]->second;
    items.push_back({r.stream.get(), std::span(r.pending).first(static_cast<size_t>(frames[i] * width)),
                     &outputs[first_output + i].audio});
  }
  // A decoder that batches checks every item before any stream moves, so a batch refused for its
  // codes can be decoded again one request at a time to find the requests at fault. Any other
  // failure (the device) may have left the streams half-advanced: the whole batch fails.
  std::vector<bool> failed(batch.size(), false);
  bool decoded = false;
  if (items.size() > 1) {
    try {
      decoder_.decode_batch(items);
      decoded = true;
    } catch (const Error& e) {
      for (size_t i = 0; i < batch.size(); ++i) {
        outputs[first_output + i].audio.clear();
        if (e.code() != ErrorCode::kInvalidArgument) {
          outputs[first_output + i].error = e;
          failed[i] = true;
        }
      }
      decoded = e.code() != ErrorCode::kInvalidArgument;
    }
  }
  if (!decoded) {
    for (size_t i = 0; i < items.size(); ++i) {
      try {
        decoder_.decode(*items[i].stream, items[i].codes, *items[i].audio);
      } catch (const Error& e) {
        AudioOutput& out = outputs[first_output + i];
        out.audio.clear();
        out.error = e;
        failed[i] = true;
      }
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& r = batch[i]->second;
    AudioOutput& out = outputs[first_output + i];
    if (failed[i]) {
      out.finished = true;
      requests_.erase(batch[i]);
      continue;
    }
    const int64_t pending = static_cast<int64_t>(r.pending.size()) / width;
    out.finished = r.input_ended && frames[i] == pending;
    r.pending.erase(r.pending.begin(), r.pending.begin() + frames[i] * width);
    if (out.finished) requests_.erase(batch[i]);
  }
}

}  // namespace omni::engine
