// Metrics of a run: RUN_DIR/metrics.jsonl (one JSON object per logged step, stable names) and
// RUN_DIR/metrics.csv (fixed columns, for spreadsheets).
#pragma once
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/metrics.h"

namespace normlab {

class MetricsWriter {
 public:
  // Opens both files for appending. With resume_step >= 0, first drops every record whose step is
  // above resume_step (written after the checkpoint the run resumes from) and every end event, so
  // that a resumed run's files read as if it had never stopped.
  MetricsWriter(const std::string& run_dir, long resume_step = -1);
  void write(const nlohmann::json& record);
  static const char* const* csv_columns();

 private:
  std::ofstream jsonl_, csv_;
};

// Reads every record of RUN_DIR/metrics.jsonl (for reports and tests).
std::vector<nlohmann::json> read_metrics(const std::string& run_dir);

// The end of the run in RUN_DIR: its last end event, or for a run written before end events (or
// still running, or killed) one reconstructed from the step lines (from_event false, reason "",
// train loss over the logged steps among the last 20, val loss the last logged one). Nothing
// when the run has no metrics.jsonl or no step record yet.
std::optional<RunEnd> read_run_end(const std::string& run_dir);
std::optional<RunEnd> run_end_of(const std::vector<nlohmann::json>& records);

}  // namespace normlab
