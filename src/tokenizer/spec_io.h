// The tokenizer section of a .pocket package. Version 2 (byte-level BPE) holds the tokenizer's
// lookup tables ready to use (BpeTables), so loading maps them in place; version 1 (llama2.c
// tokenizers, and packages written before version 2) holds a TokenizerSpec in a compact binary
// form that is parsed into memory. The layouts are specified in docs/format.md.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

// The section for `tokenizer`: version 2 for byte-level BPE, version 1 otherwise.
StatusOr<std::string> SerializeTokenizer(const Tokenizer& tokenizer);
// Version 1 from a spec. Fails when a merge names a part that is not a token of the vocabulary.
StatusOr<std::string> SerializeTokenizerSpec(const TokenizerSpec& spec);
// The spec of a section of either version (for tools; the chat template is not part of this
// section, it has its own). `name` appears in errors.
StatusOr<TokenizerSpec> DeserializeTokenizerSpec(std::string_view bytes, const std::string& name);
// The tokenizer of a section. A version 2 section is used in place when it is 4-byte aligned:
// `keep_alive` must keep `bytes` valid for as long as the tokenizer lives (the mapped file).
StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizerSection(
    std::string_view bytes, const std::string& name, std::string chat_template,
    std::shared_ptr<const void> keep_alive);

}  // namespace pocket
