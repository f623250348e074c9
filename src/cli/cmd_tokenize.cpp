// `normlab tokenize`: a text file or folder -> a pre-tokenized, memory-mappable token file
// (NLTOKENS format, see include/normlab/data.h) for corpora larger than memory.
#include <fmt/format.h>

#include "cli/commands.h"
#include "normlab/data.h"

namespace normlab::cli {

void add_tokenize(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("tokenize", "Turn a UTF-8 text file or folder into a byte-level "
                                             "token file that training memory-maps (data.path)");
  auto o = std::make_shared<std::pair<std::string, std::string>>();
  cmd->add_option("--input,-i", o->first, "Text file or folder")->required();
  cmd->add_option("--out,-o", o->second, "Token file to write")->required();
  cmd->callback([&action, o] {
    action = [o] {
      const TokenCorpus text = TokenCorpus::from_text_path(o->first);
      std::vector<int> tokens(text.size());
      text.copy(0, text.size(), tokens.data());
      write_token_file(o->second, tokens, ByteTokenizer::kVocabSize);
      fmt::print("wrote {} tokens to {}\n", tokens.size(), o->second);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
