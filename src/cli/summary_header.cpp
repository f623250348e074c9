#include "cli/summary_header.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "normlab/config_file.h"
#include "tensor/threading.h"

#ifndef NORMLAB_VERSION
#error "NORMLAB_VERSION is defined by CMakeLists.txt from project(VERSION)"
#endif

namespace normlab::cli {

std::string_view normlab_version() { return NORMLAB_VERSION; }

namespace {
// 'a b' -> "'a b'", it's -> 'it'\''s'; plain words stay as they are.
std::string shell_quoted(const std::string& a) {
  const bool plain = !a.empty() && a.find_first_not_of(
                                       "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789_-+=./,:@%^") == std::string::npos;
  if (plain) return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string out;
  std::size_t start = 0;
  while (start < all.size()) {
    std::size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    out += (out.empty() ? "" : " ") + shell_quoted(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (!line.starts_with("model name")) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto b = line.find_first_not_of(" \t", colon + 1);
    if (b != std::string::npos) return line.substr(b);
  }
  return "unknown CPU";
}

std::string summary_header(std::string_view title, const ConfigOptions& opts, const Config& cfg,
                           int run_threads, int parallel_runs) {
  const std::time_t t = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &utc);
  const int cores = available_cores();
  const int threads = run_threads > 0 ? run_threads : cores;
  std::string overrides;
  for (const auto& o : opts.overrides) overrides += (overrides.empty() ? "" : ", ") + shell_quoted(o);
  std::string s = fmt::format("# {}\n\n", title);
  s += fmt::format("- command: `{}`\n", command_line());
  s += fmt::format("- normlab: {}\n", normlab_version());
  s += fmt::format("- date: {}\n", date);
  s += fmt::format("- CPU: {} ({} cores available; {} thread{} per run{})\n", cpu_model_name(), cores,
                   threads, threads == 1 ? "" : "s",
                   parallel_runs > 1 ? fmt::format(", {} runs at once", parallel_runs) : "");
  s += fmt::format("- config: {}; overrides: {}\n",
                   opts.config_path.empty() ? std::string("built-in defaults") : opts.config_path,
                   overrides.empty() ? std::string("none") : overrides);
  s += "\n<details><summary>the config as resolved (every key)</summary>\n\n```toml\n";
  s += dump_config_toml(cfg);
  if (!s.ends_with('\n')) s += '\n';
  s += "```\n\n</details>\n\n";
  return s;
}

void prepend_to_file(const std::string& path, const std::string& head) {
  std::string body;
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    body = ss.str();
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << head << body;
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace normlab::cli
