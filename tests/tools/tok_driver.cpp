// Drives normlab's tokenizers for tests/py/test_tokenizers_reference.py, one process per batch:
//   tok_driver info FILE             one JSON object: vocab_size, describe, bos, eos, unk
//   tok_driver encode FILE           stdin: JSON strings, one a line; stdout: [ids, ids_special]
//   tok_driver decode FILE           stdin: JSON id arrays; stdout: [text, text_skip_special]
//   tok_driver decode_bytes FILE     stdin: JSON id arrays; stdout: hex of decode_bytes
//   tok_driver batch FILE            stdin: JSON strings; stdout: "same" if encode_batch (threads)
//                                    equals encoding each alone, else the first differing line
//   tok_driver bench FILE TEXT [N [lines]]  encodes TEXT's content N times (default 3) on one
//                                    thread, whole or line by line; prints {"bytes", "tokens",
//                                    "seconds", "mb_per_s"} of the best round
//   tok_driver lossy                 stdin: hex byte strings; stdout: JSON of utf8_lossy(bytes)
// Errors: "FormatError: ..." / "InputError: ..." on stderr and exit status 1.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "text/utf8.h"

using namespace normlab;
using json = nlohmann::json;

namespace {

std::string from_hex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::string to_hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

json opt(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }

int run(int argc, char** argv) {
  if (argc < 2) throw InputError("usage: tok_driver info|encode|decode|batch|bench|lossy ...");
  const std::string cmd = argv[1];
  std::string line;
  if (cmd == "lossy") {
    while (std::getline(std::cin, line)) std::cout << json(text::utf8_lossy(from_hex(line))).dump() << '\n';
    return 0;
  }
  if (argc < 3) throw InputError("tok_driver " + cmd + ": a tokenizer file is needed");
  const auto tok = load_tokenizer(argv[2]);
  if (cmd == "info") {
    const SpecialTokens s = tok->special();
    std::cout << json{{"vocab_size", tok->vocab_size()}, {"describe", tok->describe()},
                      {"bos", opt(s.bos)}, {"eos", opt(s.eos)}, {"unk", opt(s.unk)}}
                     .dump()
              << '\n';
  } else if (cmd == "encode") {
    while (std::getline(std::cin, line)) {
      const std::string text = json::parse(line).get<std::string>();
      std::cout << json::array({tok->encode(text, false), tok->encode(text, true)}).dump() << '\n';
    }
  } else if (cmd == "decode" || cmd == "decode_bytes") {
    while (std::getline(std::cin, line)) {
      const auto ids = json::parse(line).get<std::vector<int>>();
      if (cmd == "decode")
        std::cout << json::array({tok->decode(ids, false), tok->decode(ids, true)}).dump() << '\n';
      else
        std::cout << to_hex(tok->decode_bytes(ids, false)) << '\n';
    }
  } else if (cmd == "batch") {
    std::vector<std::string> texts;
    while (std::getline(std::cin, line)) texts.push_back(json::parse(line).get<std::string>());
    const std::vector<std::string_view> views(texts.begin(), texts.end());
    const auto batch = tok->encode_batch(views, true);
    for (std::size_t i = 0; i < texts.size(); ++i)
      if (batch[i] != tok->encode(texts[i], true)) {
        std::cout << "differs at " << i << '\n';
        return 1;
      }
    std::cout << "same\n";
  } else if (cmd == "bench") {
    if (argc < 4) throw InputError("tok_driver bench FILE TEXT [N]");
    std::ifstream in(argv[3], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const int rounds = argc > 4 ? std::stoi(argv[4]) : 3;
    const bool by_line = argc > 5 && std::string(argv[5]) == "lines";
    std::vector<std::string_view> lines;
    for (std::size_t b = 0; b < text.size();) {
      std::size_t e = text.find('\n', b);
      e = e == std::string::npos ? text.size() : e + 1;
      lines.push_back(std::string_view(text).substr(b, e - b));
      b = e;
    }
    double best = 1e30;
    std::size_t n = 0;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      n = 0;
      if (by_line)
        for (const auto l : lines) n += tok->encode(l, false).size();
      else
        n = tok->encode(text, false).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
    }
    std::cout << json{{"bytes", text.size()}, {"tokens", n}, {"seconds", best},
                      {"mb_per_s", static_cast<double>(text.size()) / 1e6 / best}}
                     .dump()
              << '\n';
  } else {
    throw InputError("tok_driver: unknown command " + cmd);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const FormatError& e) {
    std::fprintf(stderr, "FormatError: %s\n", e.what());
  } catch (const InputError& e) {
    std::fprintf(stderr, "InputError: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
