// What a served checkpoint tells the API about itself (voices, task types, sample rate), as its
// model family describes it (model/stage_model_registry.h's ModelDescriber), so that the server
// never reads checkpoint files. A plain value.
#pragma once

#include <string>
#include <vector>

namespace omni::model {

struct ModelFacts {
  std::vector<std::string> voices;      // built-in speakers, as the checkpoint spells them, sorted
  std::vector<std::string> task_types;  // the speech tasks it serves (e.g. "CustomVoice"), sorted
  int audio_sample_rate = 0;            // of its audio output; 0: no audio output, or unknown
  int audio_input_sample_rate = 0;      // of the audio it reads (chat audio parts); 0: it reads none
  bool image_input = false;             // it reads images (chat image parts)
  bool video_input = false;             // it reads video (chat video parts), sampled as below
  double video_fps = 2.0;               // frames kept per second of video
  int video_min_frames = 4;
  int video_max_frames = 768;
  int video_frame_multiple = 2;  // the kept frame count is a multiple of it (a temporal patch)

  // Adds `other` in: voices and task types unioned (sorted, once each), the first sample rate kept,
  // image and video input if either reads them (the video sampling of the first that does).
  void merge(const ModelFacts& other);

  bool operator==(const ModelFacts&) const = default;
};

}  // namespace omni::model
