// The route families of the OpenAI-compatible API, one file each. Each add_* registers its
// routes; handlers capture `context`, which must outlive the router.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "base/metrics.h"
#include "server/router.h"
#include "server/serving_context.h"
#include "server/speech_request.h"

namespace omni::server {

// GET /health, /v1/models, /version, /metrics (info_routes.cc); /metrics answers what
// `render_metrics` renders. The model cards describe the pipeline (its outputs, the speech task of
// `speech`) and list the endpoints of `router`, which must outlive it.
void add_info_routes(Router& router, const ServingContext& context, std::function<std::string()> render_metrics,
                     const SpeechOptions& speech);
// POST /v1/completions (completions.cc).
void add_completion_routes(Router& router, const ServingContext& context);
// POST /v1/chat/completions (chat_completions.cc).
void add_chat_completion_routes(Router& router, const ServingContext& context);
// POST /tokenize, /detokenize (tokenize.cc).
void add_tokenize_routes(Router& router, const ServingContext& context);
// POST /v1/audio/speech, /v1/audio/speech/batch (speech.cc) and the voice routes below; `options`
// must outlive the router.
void add_speech_routes(Router& router, const ServingContext& context, const SpeechOptions& options);
// POST /v1/images/generations (images.cc).
void add_image_routes(Router& router, const ServingContext& context);
// WebSocket /v1/audio/speech/stream (speech_stream.cc): incremental text in, speech per sentence out.
void add_speech_stream_route(Router& router, const ServingContext& context, const SpeechOptions& options);
// Resolves `request`'s ref_audio (when it has one) into additional_information.speaker_embedding
// (and, for in-context cloning, additional_information.ref_code: the reference's codec frames)
// with options.embedder, then calls `ready` on the responder's executor, or `failed` there with the
// error; `request` must stay alive until one of them ran (speech.cc).
void with_speaker_embedding(const SpeechOptions& options, const std::shared_ptr<Responder>& responder,
                            SpeechRequest& request, std::function<void()> ready,
                            std::function<void(std::exception_ptr)> failed);
// GET /v1/audio/voices, and with a speaker encoder POST /v1/audio/voices and DELETE
// /v1/audio/voices/{name} (voices.cc).
void add_voice_routes(Router& router, const SpeechOptions& options);
// POST /v1/omni/sleep, /v1/omni/wakeup (omni_control.cc); both answer 400 unless `enable_sleep_mode`.
void add_omni_control_routes(Router& router, const ServingContext& context, bool enable_sleep_mode);
// GET / and /playground: the browser playground page (playground_routes.cc).
void add_playground_routes(Router& router);

}  // namespace omni::server
