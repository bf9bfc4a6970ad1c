// Constrained generation: a constraint decides, token by token, which tokens may come next, so
// the output is valid by construction (the sampler only ever sees allowed tokens). The first
// constraint is a choice among fixed strings; regular expressions, JSON Schema and GBNF grammars
// will implement the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

class Constraint {
 public:
  virtual ~Constraint() = default;
  // Back to the start (before any token was accepted).
  virtual void Reset() = 0;
  // The tokens allowed next (the stop tokens are handled by the caller: allowed exactly when
  // Complete()). Empty when nothing can extend the output.
  virtual const std::vector<int32_t>& Allowed() = 0;
  // Takes a token; an error when it is not allowed (the caller masks, so this is a bug guard).
  virtual Status Accept(int32_t token) = 0;
  // The output so far is a whole valid output (the model may stop here).
  virtual bool Complete() const = 0;
};

// The output is exactly one of `choices` (non-empty strings, valid UTF-8). Works over the bytes
// of the tokenizer's tokens, so any tokenization of a choice is allowed, not only the canonical
// one; special tokens are never allowed inside.
// The tokenizer must outlive the constraint.
StatusOr<std::unique_ptr<Constraint>> MakeChoiceConstraint(const Tokenizer& tokenizer,
                                                           std::vector<std::string> choices);

// The output matches `pattern` as a whole (anchors are implied). The subset: literal characters
// (UTF-8), '.' (any character but a newline), escapes \d \D \w \W \s \S \n \t \r \uXXXX and
// escaped punctuation, classes [abc] [a-z] [^...] (escapes allowed inside), groups (...) and
// (?:...), alternation |, greedy quantifiers * + ? {n} {n,} {n,m} (counts up to 1000). Anything
// else (lookaround, backreferences, lazy quantifiers, ^ $) is an error naming the offset.
StatusOr<std::unique_ptr<Constraint>> MakeRegexConstraint(const Tokenizer& tokenizer,
                                                          std::string_view pattern);

}  // namespace pocket
