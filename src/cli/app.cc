#include "cli/app.h"

#include <cstdio>
#include <exception>
#include <map>

#include "base/error.h"
#include "base/log.h"
#include "cli/command.h"
#include "cli/generate.h"
#include "cli/version.h"

namespace omni::cli {

std::vector<Command> all_commands() { return {generate_command()}; }

int run(int argc, char** argv) {
  CLI::App app{"omnistage — serves multi-stage omni models (text, audio, image) behind an OpenAI-compatible API"};
  app.name("omnistage");
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", version_text());

  std::string log_level;
  std::string log_file;
  app.add_option("--log-level", log_level,
                 "Log level: trace, debug, info, warning, error, critical, off "
                 "(default: $OMNISTAGE_LOG_LEVEL, else info)");
  app.add_option("--log-file", log_file, "Also write the log to this file");

  std::map<CLI::App*, std::function<int()>> runners;
  for (const Command& command : all_commands()) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    runners[sub] = command.setup(*sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "omnistage: error: %s\nRun 'omnistage --help' for the flags and subcommands.\n", e.what());
    return exit_code(ErrorCode::kInvalidArgument);
  } catch (const Error& e) {
    std::fprintf(stderr, "omnistage: error: %s\n", e.what());
    return e.exit_code();
  }

  try {
    init_logging(log_level, log_file);
    for (CLI::App* sub : app.get_subcommands()) return runners.at(sub)();
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "omnistage: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "omnistage: internal error: %s\n", e.what());
    return exit_code(ErrorCode::kInternal);
  }
}

}  // namespace omni::cli
