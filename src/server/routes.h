// The route families of the OpenAI-compatible API, one file each. Each add_* registers its
// routes; handlers capture `context`, which must outlive the router.
#pragma once

#include <functional>
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
// POST /v1/audio/speech, GET /v1/audio/voices (speech.cc); `options` must outlive the router.
void add_speech_routes(Router& router, const ServingContext& context, const SpeechOptions& options);
// POST /v1/omni/sleep, /v1/omni/wakeup (omni_control.cc); both answer 400 unless `enable_sleep_mode`.
void add_omni_control_routes(Router& router, const ServingContext& context, bool enable_sleep_mode);
// GET / and /playground: the browser playground page (playground_routes.cc).
void add_playground_routes(Router& router);

}  // namespace omni::server
