// GBNF grammars in llama.cpp's syntax, parsed into a Grammar.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "generate/grammar.h"

namespace pocket {

struct GbnfOptions {
  std::string root = "root";  // the start rule
  // Span extension: references to the rule named `span_rule` (which the grammar must not define)
  // match any substring of `span_source` (SpanEscaping::kRaw). Empty: no span rule.
  std::string span_rule;
  std::string span_source;
};

// Parses `text`; errors name the line and column. The result has passed Grammar::Check().
StatusOr<std::unique_ptr<Grammar>> ParseGbnf(std::string_view text,
                                             const GbnfOptions& options = {});

}  // namespace pocket
