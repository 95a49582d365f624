#include "cli/chat_media_options.h"

namespace omni::cli {

server::ChatMediaOptions chat_media_options(const model::ModelFacts& facts) {
  server::ChatMediaOptions options;
  options.audio_sample_rate = facts.audio_input_sample_rate;
  options.images = facts.image_input;
  options.videos = facts.video_input;
  options.video_sampling = {facts.video_fps, facts.video_min_frames, facts.video_max_frames,
                            facts.video_frame_multiple};
  return options;
}

}  // namespace omni::cli
