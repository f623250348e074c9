// normlab: train and study decoder-only Transformers under different normalization strategies.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "cli/checkpoint_hint.h"
#include "cli/commands.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab::cli {

void ConfigOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--config,-c", config_path,
                  "TOML config file (default: built-in defaults; every key with its default: "
                  "normlab train --dump-config)");
  cmd->add_option("--set", overrides,
                  "Override one config key, e.g. --set model.placement=peri (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

Config ConfigOptions::load() const { return load_config(config_path, overrides); }

namespace {

// CLI11's help with every option's default at the end of its description ("Sampling seed
// [default: 1]") instead of glued to its type ("UINT:an integer >= 0=1"). Options without a
// default (empty text, an empty list, flags) show none, and neither do required options: the user
// gives their value, so the captured initial value ("--vocab-size ... [default: 0]") is no default.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    std::string out;
    if (opt->get_type_size() != 0) {
      if (!opt->get_type_name().empty()) out += " " + get_label(opt->get_type_name());
      if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
      else if (opt->get_expected_min() > 1) out += fmt::format(" x {}", opt->get_expected());
      if (opt->get_required()) out += " " + get_label("REQUIRED");
    }
    if (!opt->get_envname().empty())
      out += fmt::format(" ({}:{})", get_label("Env"), opt->get_envname());
    const auto names = [this, &out](std::string_view label, const auto& opts) {
      if (opts.empty()) return;
      out += fmt::format(" {}:", get_label(std::string(label)));
      for (const CLI::Option* o : opts) out += " " + o->get_name();
    };
    names("Needs", opt->get_needs());
    names("Excludes", opt->get_excludes());
    return out;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    const std::string& d = opt->get_default_str();
    // A description that already says its default in words keeps only those.
    if (opt->get_type_size() == 0 || d.empty() || d == "[]" || opt->get_required() ||
        opt->get_description().find("(default") != std::string::npos)
      return opt->get_description();
    return fmt::format("{} [default: {}]", opt->get_description(), d);
  }
};

}  // namespace

}  // namespace normlab::cli

int main(int argc, char** argv) {
  using namespace normlab;
  using namespace normlab::cli;
  CLI::App app{"normlab: train and study decoder-only Transformers under Post-, Pre- and Peri-Norm,\n"
               "QK-Norm, logit soft-capping and z-loss."};
  app.require_subcommand(1);
  // Every option's --help line shows its default ("[4]"); subcommands inherit this setting, so it
  // comes before any of them is added.
  app.option_defaults()->always_capture_default();
  app.formatter(std::make_shared<HelpFormatter>());
#ifdef NORMLAB_WITH_MPI
  app.set_version_flag("--version", "normlab " NORMLAB_VERSION " (MPI)");
#else
  app.set_version_flag("--version", "normlab " NORMLAB_VERSION);
#endif
  Action action;
  add_train(app, action);
  add_eval(app, action);
  add_generate(app, action);
  add_info(app, action);
  add_compare(app, action);
  add_report(app, action);
  add_gradflow(app, action);
  add_coordcheck(app, action);
  add_sweep(app, action);
  add_tokenize(app, action);
  add_tokenizer(app, action);
  add_interop(app, action);
  add_doctor(app, action);
  add_export_metrics(app, action);
  try {
    cli::command_args().assign(argv + 1, argv + argc);  // for hints that repeat the command
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  try {
    return action ? action() : kExitUsage;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "normlab: %s\n", e.what());
    return kExitUsage;
  } catch (const FormatError& e) {
    std::fprintf(stderr, "normlab: %s\n", e.what());
    return kExitInput;
  } catch (const InputError& e) {
    std::fprintf(stderr, "normlab: %s\n", e.what());
    return kExitInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normlab: error: %s\n", e.what());
    return kExitRuntime;
  }
}
