// The chat media a served checkpoint reads, from what its stage models say of it
// (model::ModelFacts): `serve` and the command line's chats (`generate --messages`) take the same.
#pragma once

#include "model/model_facts.h"
#include "server/chat_media.h"

namespace omni::cli {

// The audio input rate, images, video and its sampling; the limits and paths keep their defaults.
server::ChatMediaOptions chat_media_options(const model::ModelFacts& facts);

}  // namespace omni::cli
