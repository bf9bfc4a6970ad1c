// The tokenizer section of a .pocket package: a TokenizerSpec in a compact binary form (token
// bytes, types, optional scores, merges as pairs of token ids), loaded in a few milliseconds.
// The layout is specified in docs/format.md.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

// Fails when a merge names a part that is not a token of the vocabulary.
StatusOr<std::string> SerializeTokenizerSpec(const TokenizerSpec& spec);
// The chat template is not part of this section (it has its own); `name` appears in errors.
StatusOr<TokenizerSpec> DeserializeTokenizerSpec(std::string_view bytes, const std::string& name);

}  // namespace pocket
