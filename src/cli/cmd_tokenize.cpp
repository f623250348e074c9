// `normlab tokenize`: a text file or folder -> a pre-tokenized, memory-mappable token file
// (NLTOKENS format, see include/normlab/data.h) for corpora larger than memory, with normlab's
// byte tokenizer or a tokenizer.json / SentencePiece model.
#include <fmt/format.h>

#include "cli/commands.h"
#include "normlab/data.h"
#include "normlab/tokenizer.h"

namespace normlab::cli {

void add_tokenize(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("tokenize", "Turn a UTF-8 text file or folder into a token file "
                                             "that training memory-maps (data.path)");
  struct Opts {
    std::string input, out, tokenizer = "bytes";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--input,-i", o->input, "Text file or folder (one document per file)")->required();
  cmd->add_option("--out,-o", o->out, "Token file to write")->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "bytes, a tokenizer.json or a SentencePiece .model (train with the same one: "
                  "data.tokenizer)")
      ->default_val("bytes");
  cmd->callback([&action, o] {
    action = [o] {
      const auto tok = load_tokenizer(o->tokenizer);
      const std::vector<TextDocument> docs = read_text_documents(o->input);
      std::size_t bytes = 0;
      for (const auto& d : docs) bytes += d.text.size() + 1;
      const TokenCorpus text = TokenCorpus::from_documents(docs, o->input, *tok);
      std::vector<int> tokens(text.size());
      text.copy(0, text.size(), tokens.data());
      write_token_file(o->out, tokens, tok->vocab_size());
      fmt::print("wrote {} tokens ({} documents, {:.3f} bytes/token, vocabulary {}) to {}\n",
                 tokens.size(), docs.size(), static_cast<double>(bytes - 1) / tokens.size(),
                 tok->vocab_size(), o->out);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
