// Constrained generation: a constraint decides, token by token, which tokens may come next, so
// the output is valid by construction (the sampler only ever sees allowed tokens). The first
// constraints: a choice among fixed strings, regular expressions, and grammars (grammar.h: GBNF,
// JSON Schema, span fields).
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
  // The same as a bit mask over the vocabulary (bit id % 64 of word id / 64), resized to cover
  // it; returns how many tokens are allowed. Grammar constraints compute this form natively.
  virtual size_t AllowedMask(std::vector<uint64_t>* mask);
  // Takes a token; an error when it is not allowed (the caller masks, so this is a bug guard).
  virtual Status Accept(int32_t token) = 0;
  // The output so far is a whole valid output (the model may stop here).
  virtual bool Complete() const = 0;
  // An error that stopped the constraint (e.g. an engine limit while computing a mask): then
  // Allowed() is empty and generation reports this error.
  virtual Status error() const { return Status::Ok(); }
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

// Everything that selects a constraint, as the CLI and the C API take it. At most one of
// choices, regex, json_schema and grammar may be given. An empty string means "not given"; one
// that is only whitespace is an error ("blank regex", ...), and so is an empty or blank choice.
struct ConstraintSpec {
  std::vector<std::string> choices;
  std::string regex;
  std::string json_schema;  // JSON Schema text
  std::string grammar;      // GBNF text
  // Span fields: the source text; schema properties to treat as spans (besides those marked
  // "x-pocket-span": true); the GBNF rule name that matches a span.
  std::string span_source;
  bool has_span_source = false;
  std::vector<std::string> span_fields;
  std::string span_rule = "span";
  bool empty() const {
    return choices.empty() && regex.empty() && json_schema.empty() && grammar.empty();
  }
};

// The constraint `spec` describes; nullptr (no error) when it describes none.
StatusOr<std::unique_ptr<Constraint>> MakeConstraint(const Tokenizer& tokenizer,
                                                     const ConstraintSpec& spec);

}  // namespace pocket
