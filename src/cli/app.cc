#include "cli/app.h"

#include <cstdio>
#include <exception>
#include <map>

#include "base/error.h"
#include "base/log.h"
#include "cli/bench_serve.h"
#include "cli/command.h"
#include "cli/config_command.h"
#include "cli/demo_model.h"
#include "cli/download.h"
#include "cli/generate.h"
#include "cli/serve.h"
#include "cli/stage_worker.h"
#include "cli/tokenize.h"
#include "cli/tp_rank.h"
#include "cli/version.h"

namespace omni::cli {

std::vector<Command> all_commands() {
  return {serve_command(),        config_command(), generate_command(),   download_command(), tokenize_command(),
          stage_worker_command(), bench_command(),  demo_model_command(), tp_rank_command()};
}

namespace {

// Applies the chosen subcommand's rewrite_args to the arguments after its name. The subcommand
// is the first argument that is not a global flag or a global flag's value.
std::vector<std::string> rewrite_arguments(const std::vector<Command>& commands, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = args[static_cast<size_t>(i)];
    if (arg == "--log-level" || arg == "--log-file") {
      ++i;
      continue;
    }
    if (!arg.empty() && arg[0] == '-') continue;
    for (const Command& command : commands) {
      if (command.name != arg || !command.rewrite_args) continue;
      std::vector<std::string> tail(args.begin() + i + 1, args.end());
      std::vector<std::string> out(args.begin(), args.begin() + i + 1);
      for (std::string& rewritten : command.rewrite_args(tail)) out.push_back(std::move(rewritten));
      return out;
    }
    break;
  }
  return args;
}

}  // namespace

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
  const std::vector<Command> commands = all_commands();
  for (const Command& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    runners[sub] = command.setup(*sub);
  }

  try {
    std::vector<std::string> args = rewrite_arguments(commands, argc, argv);
    std::vector<char*> pointers;
    pointers.reserve(args.size());
    for (std::string& arg : args) pointers.push_back(arg.data());
    app.parse(static_cast<int>(pointers.size()), pointers.data());
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
