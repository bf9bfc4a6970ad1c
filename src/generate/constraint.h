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

// A constraint is used from one thread at a time. Clones share immutable tables and (for grammars)
// the lazily instantiated grammar rules and the mask cache, so a constraint and its clones must
// not be used concurrently either.
class Constraint {
 public:
  virtual ~Constraint() = default;
  // Back to the start (before any token was accepted); forgets the accepted tokens, so
  // n_accepted() is 0 and nothing can be rolled back.
  virtual void Reset() = 0;
  // An independent copy in the same state, including the accepted tokens it can roll back:
  // accepting or rolling back tokens on the copy does not affect the original, nor the reverse.
  // Cheap: the compiled tables (token bytes, grammar, vocabulary trie, mask cache) are shared,
  // only the state and its per-token history are copied (for speculative decoding: a drafter
  // explores on a copy).
  virtual std::unique_ptr<Constraint> Clone() const = 0;
  // Tokens accepted since construction or the last Reset().
  virtual size_t n_accepted() const = 0;
  // Undoes the last `n_tokens` accepted tokens: Allowed(), AllowedMask(), Complete() and error()
  // then behave exactly as after the first n_accepted() - n_tokens accepts (an error set while
  // computing a mask after those is cleared with them). Rollback(0) changes nothing. Costs time in
  // proportion to the work of the undone tokens, not to the whole output. More tokens than
  // n_accepted() is an InvalidArgument error naming both numbers, and changes nothing. For
  // speculative decoding: a verifier accepts the k drafted tokens and rolls back the rejected.
  Status Rollback(size_t n_tokens);
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

 protected:
  Constraint() = default;
  Constraint(const Constraint&) = default;  // for Clone
  Constraint& operator=(const Constraint&) = default;
  // Rollback's work, with 0 < n_tokens <= n_accepted() checked.
  virtual void RollbackTokens(size_t n_tokens) = 0;
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

// Several values of one JSON Schema in a row, for outputs such as a turn of tool calls: the first
// value, then up to max_values - 1 more, each preceded by `separator`, and then, optionally,
// `close`. An empty separator: no list (one value, the plain schema constraint).
struct JsonList {
  std::string separator;
  std::string close;
  int32_t max_values = 0;  // 0: no limit
  bool empty() const { return separator.empty(); }
};

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
  // With json_schema: a list of its values rather than one.
  JsonList json_list;
  bool empty() const {
    return choices.empty() && regex.empty() && json_schema.empty() && grammar.empty();
  }
};

// The constraint `spec` describes; nullptr (no error) when it describes none.
StatusOr<std::unique_ptr<Constraint>> MakeConstraint(const Tokenizer& tokenizer,
                                                     const ConstraintSpec& spec);

}  // namespace pocket
