// GET / and GET /playground: the playground page, a browser client of the public API. The page
// asks GET /v1/models what the pipeline produces and which endpoints the server answers, and
// shows the panels that apply (chat, speech, images). It loads nothing from elsewhere: the
// Content-Security-Policy below lets it reach only this server.
#include "server/playground_page.h"
#include "server/routes.h"

namespace omni::server {

void add_playground_routes(Router& router) {
  for (const char* path : {"/", "/playground"}) {
    router.add("GET", path, [](HttpRequest&, std::shared_ptr<Responder> responder) {
      HttpResponse response;
      response.content_type = "text/html; charset=utf-8";
      response.body = std::string(playground_page());
      response.headers = {{"Cache-Control", "no-cache"},
                          {"Content-Security-Policy",
                           "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                           "connect-src 'self'; img-src 'self' data: blob:; media-src 'self' data: blob:; "
                           "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
                          {"X-Content-Type-Options", "nosniff"}};
      responder->respond(std::move(response));
    });
  }
}

}  // namespace omni::server
