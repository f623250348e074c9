// The default corpus, data/wordnet_glosses.txt, linked into the library as read-only bytes by
// the assembler's .incbin: no multi-megabyte C array for the compiler to parse.
//
// The compiler's dependency scan cannot see a file that only the assembler reads, so this file
// includes wordnet_glosses_stamp.h, which scripts/make_corpus.py rewrites together with the
// corpus: regenerating the corpus therefore recompiles this file (Data.EmbeddedCorpus checks that
// the embedded bytes match the stamp).
#include "normlab/data.h"
#include "wordnet_glosses_stamp.h"

#ifndef NORMLAB_SOURCE_DIR
#error "NORMLAB_SOURCE_DIR (the source tree, as a string literal) must be defined; CMake does it"
#endif
#if !defined(__ELF__)
#error "embedded_corpus.cpp uses ELF assembler directives (.section flags, .type, .size)"
#endif

// The path is a string literal made by concatenation, as .incbin needs. '%' rather than '@'
// before the section and symbol types, since '@' starts a comment on some targets (ARM). The
// symbols are hidden: only embedded_corpus() below refers to them. A NUL after the end symbol
// makes the data a C string too, for debuggers.
__asm__(
    ".pushsection .rodata.normlab_embedded_corpus, \"a\", %progbits\n"
    ".balign 16\n"
    ".global normlab_embedded_corpus_begin\n"
    ".hidden normlab_embedded_corpus_begin\n"
    ".type normlab_embedded_corpus_begin, %object\n"
    "normlab_embedded_corpus_begin:\n"
    ".incbin \"" NORMLAB_SOURCE_DIR "/data/wordnet_glosses.txt\"\n"
    ".global normlab_embedded_corpus_end\n"
    ".hidden normlab_embedded_corpus_end\n"
    "normlab_embedded_corpus_end:\n"
    ".byte 0\n"
    ".size normlab_embedded_corpus_begin, normlab_embedded_corpus_end - "
    "normlab_embedded_corpus_begin\n"
    ".popsection\n");

extern "C" const char normlab_embedded_corpus_begin[];
extern "C" const char normlab_embedded_corpus_end[];

static_assert(NORMLAB_EMBEDDED_CORPUS_BYTES > 0, "data/wordnet_glosses.txt is empty");

namespace normlab {

std::string_view embedded_corpus() {
  return {normlab_embedded_corpus_begin,
          static_cast<std::size_t>(normlab_embedded_corpus_end - normlab_embedded_corpus_begin)};
}

}  // namespace normlab
