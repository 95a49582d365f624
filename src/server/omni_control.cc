// POST /v1/omni/sleep and /v1/omni/wakeup: sleep mode of the stages (--enable-sleep-mode).
#include <fmt/ranges.h>

#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/request_fields.h"
#include "server/routes.h"

namespace omni::server {
namespace {

// The body's stage_ids (absent or null: every stage).
std::vector<int> stage_ids_of(const FieldReader& fields) {
  std::vector<int> ids;
  if (auto given = fields.integers("stage_ids")) {
    for (int64_t id : *given) {
      if (id < 0 || id > std::numeric_limits<int>::max()) {
        throw_invalid_field("stage_ids", "stage_ids: {} is not a stage id", id);
      }
      ids.push_back(static_cast<int>(id));
    }
  }
  return ids;
}

// Answers from the backend's thread through the connection's executor.
runtime::StageControlDone answer(const std::shared_ptr<Responder>& responder) {
  return [responder](runtime::StageControlResult result) {
    responder->run([responder, result = std::move(result)] {
      if (result.error) {
        responder->respond(error_response(*result.error));
        return;
      }
      Json body = {{"status", result.status}};
      if (result.status != "SKIPPED") body["acks"] = result.acks;
      responder->respond(json_response(body));
    });
  };
}

void require_sleep_mode(bool enabled) {
  if (!enabled) {
    throw_error(ErrorCode::kInvalidArgument, "sleep mode is off: start the server with --enable-sleep-mode");
  }
}

}  // namespace

void add_omni_control_routes(Router& router, const ServingContext& context, bool enable_sleep_mode) {
  router.add("POST", "/v1/omni/sleep",
             [&context, enable_sleep_mode](HttpRequest& request, std::shared_ptr<Responder> responder) {
               require_sleep_mode(enable_sleep_mode);
               const Json body = request.body.empty() ? Json::object() : parse_request_body(request.body);
               FieldReader fields(body);
               std::vector<int> ids = stage_ids_of(fields);
               const int level = static_cast<int>(fields.integer("level", 1, 2).value_or(2));
               context.backend.sleep(std::move(ids), level, answer(responder));
             });
  router.add("POST", "/v1/omni/wakeup",
             [&context, enable_sleep_mode](HttpRequest& request, std::shared_ptr<Responder> responder) {
               require_sleep_mode(enable_sleep_mode);
               const Json body = request.body.empty() ? Json::object() : parse_request_body(request.body);
               context.backend.wake_up(stage_ids_of(FieldReader(body)), answer(responder));
             });
}

}  // namespace omni::server
