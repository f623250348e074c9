// normlab: train and study decoder-only Transformers under different normalization strategies.
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "cli/commands.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab::cli {

void ConfigOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--config,-c", config_path, "TOML config file (default: built-in defaults)");
  cmd->add_option("--set", overrides,
                  "Override one config key, e.g. --set model.placement=peri (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

Config ConfigOptions::load() const { return load_config(config_path, overrides); }

}  // namespace normlab::cli

int main(int argc, char** argv) {
  using namespace normlab;
  using namespace normlab::cli;
  CLI::App app{"normlab: train and study decoder-only Transformers under Post-, Pre- and Peri-Norm,\n"
               "QK-Norm, logit soft-capping and z-loss."};
  app.require_subcommand(1);
#ifdef NORMLAB_WITH_MPI
  app.set_version_flag("--version", "normlab 0.1.0 (MPI)");
#else
  app.set_version_flag("--version", "normlab 0.1.0");
#endif
  Action action;
  add_train(app, action);
  add_eval(app, action);
  add_generate(app, action);
  add_info(app, action);
  add_compare(app, action);
  add_report(app, action);
  add_gradflow(app, action);
  add_sweep(app, action);
  add_tokenize(app, action);
  add_tokenizer(app, action);
  add_interop(app, action);
  add_doctor(app, action);
  try {
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
