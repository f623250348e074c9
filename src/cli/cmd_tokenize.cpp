// `normlab tokenize`: a text file or folder -> a pre-tokenized, memory-mappable token file
// (NLTOKENS format, see include/normlab/data.h) for corpora larger than memory, with normlab's
// byte tokenizer or a tokenizer.json / SentencePiece model. The file records which tokenizer made
// it (its vocabulary, a hash of its content, its path), so training uses that one or refuses
// another by name.
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
                  "bytes, a tokenizer.json or a SentencePiece .model (recorded in the token "
                  "file: training uses it)")
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
      const TokenizerRecord record = tokenizer_record(*tok, o->tokenizer);
      write_token_file(o->out, tokens, tok->vocab_size(), record);
      fmt::print("wrote {} tokens ({} documents, {:.3f} bytes/token, vocabulary {}) to {}\n",
                 tokens.size(), docs.size(), static_cast<double>(bytes - 1) / tokens.size(),
                 tok->vocab_size(), o->out);
      if (docs.size() > 1) {
        const std::vector<int> sep = document_separator(*tok);
        std::string ids;
        for (const int id : sep) ids += fmt::format("{}{}", ids.empty() ? "" : ",", id);
        fmt::print("documents joined by {} (id{} {})\n",
                   sep.size() == 1 && tok->is_special(sep[0])
                       ? fmt::format("the end-of-text token {}", tok->id_to_token(sep[0]))
                       : std::string("\"\\n\""),
                   sep.size() == 1 ? "" : "s", ids);
      }
      fmt::print("tokenizer recorded: {} ({}, {})\n", record.describe, record.path, record.hash);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
