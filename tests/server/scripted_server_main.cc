// scripted_server: the API server in front of the test backend, for measuring the HTTP overhead
// with `omnistage bench serve` (docs/performance.md). Runs until SIGINT/SIGTERM.
// Usage: scripted_server PORT [TOKEN_DELAY_US] [IO_THREADS]
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "base/metrics.h"
#include "server/api_server.h"
#include "server/byte_renderer.h"
#include "server/scripted_backend.h"

namespace {

volatile std::sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PORT [TOKEN_DELAY_US] [IO_THREADS]\n", argv[0]);
    return 64;
  }
  // A handler rather than sigwait: libraries linked in (OpenBLAS) start threads before main,
  // which would otherwise receive the signal with its default action.
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  omni::testing::ScriptedBackendOptions backend_options;
  if (argc > 2) backend_options.token_delay = std::chrono::microseconds(std::atoi(argv[2]));
  omni::testing::ScriptedBackend backend(backend_options);
  omni::testing::ByteRenderer renderer;
  omni::MetricsRegistry metrics;
  omni::server::ApiServerOptions options;
  options.port = static_cast<uint16_t>(std::atoi(argv[1]));
  options.served_model_names = {"scripted"};
  options.model_path = "scripted";
  options.version = "scripted";
  if (argc > 3) options.io_threads = std::atoi(argv[3]);
  omni::server::ApiServer server(options, backend, &renderer, metrics);
  server.start();
  std::printf("scripted_server listening on 127.0.0.1:%u\n", server.port());
  std::fflush(stdout);
  while (!stop_requested) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.stop();
  return 0;
}
