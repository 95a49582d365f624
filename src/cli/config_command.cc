#include "cli/config_command.h"

#include <cstdio>
#include <memory>

#include "cli/serve_flags.h"
#include "config/config_report.h"
#include "config/json_merge.h"

namespace omni::cli {

namespace {

struct ReportOptions {
  std::string format = "table";
  bool explain = false;
};

}  // namespace

Command config_command() {
  return {"config", "Print the effective per-stage configuration serve would use, and exit",
          [](CLI::App& sub) -> std::function<int()> {
            auto parser = std::make_shared<ServeFlagParser>(sub);
            auto report = std::make_shared<ReportOptions>();
            sub.add_option("--format", report->format, "Output format")
                ->check(CLI::IsMember({"table", "json"}))
                ->default_str("table")
                ->group("Output");
            sub.add_flag("--explain", report->explain, "Show, for every field, the layer and file or flag that set it")
                ->group("Output");
            return [parser, report] {
              ServeFlags flags = parser->collect();
              use_hub_model(flags, hub::FileSet::kConfig);
              const config::EffectiveConfig config = build_config(flags);
              std::string text = report->format == "json"
                                     ? config::json_text(config::effective_config_json(config), 2) + "\n"
                                     : config::effective_config_table(config, report->explain);
              std::fputs(text.c_str(), stdout);
              return 0;
            };
          },
          rewrite_serve_args};
}

}  // namespace omni::cli
