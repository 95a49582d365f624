#include "engine/generation_engine.h"

#include <algorithm>
#include <utility>

#include "base/error.h"

namespace omni::engine {

namespace {

void expect_chunk_size(const char* what, int frames) {
  if (frames < 1) throw_error(ErrorCode::kInvalidArgument, "{} must be at least 1 frame, got {}", what, frames);
}

}  // namespace

GenerationEngine::GenerationEngine(const model::StreamingAudioDecoder& decoder, AudioChunking chunking)
    : decoder_(decoder), chunking_(chunking) {
  expect_chunk_size("initial_codec_chunk_frames", chunking.first_chunk_frames);
  expect_chunk_size("codec_chunk_frames", chunking.chunk_frames);
}

void GenerationEngine::add_request(const std::string& request_id, std::optional<int> first_chunk_frames) {
  if (requests_.count(request_id)) {
    throw_error(ErrorCode::kInvalidArgument, "request {} is already running", request_id);
  }
  Request r;
  r.first_chunk_frames = first_chunk_frames.value_or(chunking_.first_chunk_frames);
  expect_chunk_size("initial_codec_chunk_frames", r.first_chunk_frames);
  r.stream = decoder_.open_stream();
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

int64_t GenerationEngine::frames_needed(const Request& r) const {
  return r.stream->frames() == 0 ? r.first_chunk_frames : chunking_.chunk_frames;
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
  const int64_t width = decoder_.codes_per_frame();
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& r = it->second;
    if (!ready(r)) {
      ++it;
      continue;
    }
    const int64_t pending = static_cast<int64_t>(r.pending.size()) / width;
    // One chunk of the configured size; at the end of the input, everything that is left.
    const int64_t frames = std::min(pending, frames_needed(r));
    const bool finished = r.input_ended && frames == pending;
    AudioOutput out;
    out.request_id = it->first;
    try {
      decoder_.decode(*r.stream, std::span(r.pending).first(static_cast<size_t>(frames * width)), out.audio);
    } catch (const Error& e) {
      out.audio.clear();
      out.error = e.what();
      out.finished = true;
      outputs.push_back(std::move(out));
      it = requests_.erase(it);
      continue;
    }
    r.pending.erase(r.pending.begin(), r.pending.begin() + frames * width);
    out.finished = finished;
    outputs.push_back(std::move(out));
    it = finished ? requests_.erase(it) : std::next(it);
  }
  return outputs;
}

}  // namespace omni::engine
