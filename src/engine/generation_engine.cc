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
  if (chunking.max_batch < 1) {
    throw_error(ErrorCode::kInvalidArgument, "decode_batch_max_size must be at least 1, got {}", chunking.max_batch);
  }
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
  const size_t limit = static_cast<size_t>(std::min(chunking_.max_batch, decoder_.max_batch()));
  std::vector<std::map<std::string, Request>::iterator> ready_now;
  for (auto it = requests_.begin(); it != requests_.end(); ++it) {
    if (ready(it->second)) ready_now.push_back(it);
  }
  for (size_t at = 0; at < ready_now.size(); at += limit) {
    const size_t end = std::min(ready_now.size(), at + limit);
    decode({ready_now.begin() + static_cast<std::ptrdiff_t>(at), ready_now.begin() + static_cast<std::ptrdiff_t>(end)},
           outputs);
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
          outputs[first_output + i].error = e.what();
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
        out.error = e.what();
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
