// TEST ONLY: a minimal head process for the runtime's signal and exit-code tests — what `serve`
// does around the orchestrator, without HTTP. Usage: runtime_test_head PIPELINE_JSON
// It prints "ready <session> <pid>…" once the stages are up, keeps one long request running,
// and shuts down on SIGTERM/SIGINT (printing "stopped"). A stage that fails to start makes it exit
// with the error's exit code and message, like `omnistage serve`.
#include <cstdio>

#include "base/json.h"
#include "base/log.h"
#include "runtime/orchestrator.h"
#include "runtime/termination_signals.h"

int main(int argc, char** argv) {
  using namespace omni;
  using namespace omni::runtime;
  if (argc != 2) {
    std::fprintf(stderr, "usage: runtime_test_head PIPELINE_JSON\n");
    return 64;
  }
  try {
    TerminationSignals signals;  // before the orchestrator starts its thread
    init_logging("", "");        // stderr: stdout carries the "ready" line
    Json json = parse_json(argv[1], "PIPELINE_JSON");
    PipelineSpec pipeline;
    for (const Json& stage : json.at("stages")) pipeline.stages.push_back(stage_spec_from_json(stage, "PIPELINE_JSON"));
    OrchestratorOptions options;
    options.worker_program = OMNISTAGE_TEST_BINARY;
    options.control_endpoint = json.value("control_endpoint", "");
    options.heartbeat_interval = std::chrono::milliseconds(100);
    Orchestrator orchestrator(pipeline, options);

    std::string line = "ready " + orchestrator.session();
    for (const auto& replica : orchestrator.replicas()) line += " " + std::to_string(replica.pid);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);

    GenerationRequest request;
    request.request_id = "background";
    request.prompt_token_ids = {1, 2, 3};
    orchestrator.submit(request, [](const ResponseEvent& event) {
      if (event.finished) std::fprintf(stderr, "background request finished\n");
    });
    int signal = signals.wait();
    std::fprintf(stderr, "signal %d: shutting down\n", signal);
    orchestrator.shutdown();
    std::printf("stopped\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "runtime_test_head: error: %s\n", e.what());
    return e.exit_code();
  }
}
