// `normlab export-metrics RUN_DIR... --to tensorboard --out DIR`: a run's metrics.jsonl (normlab's
// or one recorded by normlab.torch.Probe) in another tracker's format. TensorBoard is the one
// format so far (report/tensorboard.h says what is written).
#include <fmt/format.h>

#include "cli/commands.h"
#include "normlab/errors.h"
#include "report/inputs.h"
#include "report/tensorboard.h"

namespace normlab::cli {

void print_tensorboard(const report::TensorboardWritten& w, const std::string& dir);

void add_export_metrics(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "export-metrics", "Write the metrics of runs (normlab's or probed PyTorch runs) for another "
                        "tracker: TensorBoard event files");
  struct Opts {
    std::vector<std::string> dirs;
    std::string to = "tensorboard";
    std::string out;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("RUN_DIR", o->dirs, "Run, sweep or compare directories")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--to", o->to, "Format: tensorboard")->capture_default_str();
  cmd->add_option("--out,-o", o->out, "Directory to write (one subdirectory per run)")->required();
  cmd->callback([&action, o] {
    action = [o] {
      if (o->to != "tensorboard")
        throw InputError(fmt::format("--to {}: unknown format (known: tensorboard)", o->to));
      print_tensorboard(report::write_tensorboard(report::load_inputs(o->dirs), o->out), o->out);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
