#include "model/model_facts.h"

#include <algorithm>

namespace omni::model {

namespace {

void add_sorted(std::vector<std::string>& into, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    auto at = std::lower_bound(into.begin(), into.end(), name);
    if (at == into.end() || *at != name) into.insert(at, name);
  }
}

}  // namespace

void ModelFacts::merge(const ModelFacts& other) {
  add_sorted(voices, other.voices);
  add_sorted(task_types, other.task_types);
  if (audio_sample_rate == 0) audio_sample_rate = other.audio_sample_rate;
  if (audio_input_sample_rate == 0) audio_input_sample_rate = other.audio_input_sample_rate;
  image_input = image_input || other.image_input;
  if (!video_input && other.video_input) {
    video_input = true;
    video_fps = other.video_fps;
    video_min_frames = other.video_min_frames;
    video_max_frames = other.video_max_frames;
    video_frame_multiple = other.video_frame_multiple;
  }
}

}  // namespace omni::model
