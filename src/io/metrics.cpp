#include "io/metrics.h"

#include <filesystem>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "normlab/errors.h"

namespace fs = std::filesystem;

namespace normlab {

namespace {
const char* const kColumns[] = {"step", "tokens", "loss", "ce", "z_loss", "lr", "grad_norm",
                                "tokens_per_s", "val_loss", nullptr};

void truncate_after(const fs::path& path, long resume_step, bool csv) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::vector<std::string> keep;
  std::string line;
  bool header = csv;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (header) {
      keep.push_back(line);
      header = false;
      continue;
    }
    long step = -1;
    try {
      step = csv ? std::stol(line.substr(0, line.find(','))) : nlohmann::json::parse(line).at("step").get<long>();
    } catch (...) {
      continue;  // a torn last line from a crash
    }
    if (step <= resume_step) keep.push_back(line);
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : keep) out << l << '\n';
}
}  // namespace

const char* const* MetricsWriter::csv_columns() { return kColumns; }

MetricsWriter::MetricsWriter(const std::string& run_dir, long resume_step) {
  const fs::path dir(run_dir);
  fs::create_directories(dir);
  if (resume_step >= 0) {
    truncate_after(dir / "metrics.jsonl", resume_step, false);
    truncate_after(dir / "metrics.csv", resume_step, true);
  }
  const bool new_csv = !fs::exists(dir / "metrics.csv") || fs::file_size(dir / "metrics.csv") == 0;
  jsonl_.open(dir / "metrics.jsonl", std::ios::app);
  csv_.open(dir / "metrics.csv", std::ios::app);
  if (!jsonl_ || !csv_) throw Error(fmt::format("cannot write metrics in {}", run_dir));
  if (new_csv) {
    for (int i = 0; kColumns[i]; ++i) csv_ << (i ? "," : "") << kColumns[i];
    csv_ << '\n';
  }
}

void MetricsWriter::write(const nlohmann::json& r) {
  jsonl_ << r.dump() << '\n';
  jsonl_.flush();
  for (int i = 0; kColumns[i]; ++i) {
    if (i) csv_ << ',';
    auto it = r.find(kColumns[i]);
    if (it != r.end() && !it->is_null()) csv_ << it->dump();
  }
  csv_ << '\n';
  csv_.flush();
}

std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  if (!in) throw FormatError(fmt::format("{} has no metrics.jsonl", run_dir));
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace normlab
