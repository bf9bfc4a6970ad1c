// MakeConstraint: from a ConstraintSpec (CLI flags, C API fields) to a constraint.
#include "generate/constraint.h"
#include "generate/gbnf.h"
#include "generate/grammar.h"
#include "generate/json_schema.h"

namespace pocket {
namespace {

// Only ASCII whitespace (or nothing): a constraint given as this is a mistake (a shell variable
// that expanded to a newline, an empty file), never a pattern anyone means.
bool Blank(std::string_view text) {
  return text.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos;
}

}  // namespace

StatusOr<std::unique_ptr<Constraint>> MakeConstraint(const Tokenizer& tokenizer,
                                                     const ConstraintSpec& spec) {
  // An empty string field means "not given"; a given one that is blank is refused, never
  // silently read as "no constraint" or as a constraint on whitespace.
  for (size_t i = 0; i < spec.choices.size(); ++i) {
    if (spec.choices[i].empty()) return InvalidArgumentError("choice ", i, " is empty");
    if (Blank(spec.choices[i]))
      return InvalidArgumentError("choice ", i, " is blank (only whitespace)");
  }
  if (!spec.regex.empty() && Blank(spec.regex))
    return InvalidArgumentError("blank regex: the pattern is only whitespace");
  if (!spec.json_schema.empty() && Blank(spec.json_schema))
    return InvalidArgumentError("blank JSON Schema: the schema text is only whitespace");
  if (!spec.grammar.empty() && Blank(spec.grammar))
    return InvalidArgumentError("blank grammar: the GBNF text is only whitespace");
  const int kinds = !spec.choices.empty() + !spec.regex.empty() + !spec.json_schema.empty() +
                    !spec.grammar.empty();
  if (kinds > 1) {
    return InvalidArgumentError(
        "give one constraint: choices, a regular expression, a JSON schema or a grammar");
  }
  if (!spec.json_list.empty() && spec.json_schema.empty())
    return InvalidArgumentError("a JSON list needs a JSON schema for its values");
  if (kinds == 0) {
    if (spec.has_span_source)
      return InvalidArgumentError("a span source needs a JSON schema or a grammar to apply to");
    return std::unique_ptr<Constraint>();
  }
  if (!spec.choices.empty()) return MakeChoiceConstraint(tokenizer, spec.choices);
  if (!spec.regex.empty()) return MakeRegexConstraint(tokenizer, spec.regex);
  std::unique_ptr<Grammar> grammar;
  if (!spec.json_schema.empty()) {
    JsonSchemaOptions o;
    o.span_source = spec.span_source;
    o.has_span_source = spec.has_span_source;
    o.span_fields = spec.span_fields;
    POCKET_ASSIGN_OR_RETURN(grammar, CompileJsonSchemaList(spec.json_schema, spec.json_list, o));
  } else {
    GbnfOptions o;
    if (spec.has_span_source) {
      o.span_rule = spec.span_rule;
      o.span_source = spec.span_source;
    }
    POCKET_ASSIGN_OR_RETURN(grammar, ParseGbnf(spec.grammar, o));
  }
  return MakeGrammarConstraint(tokenizer, std::move(grammar));
}

}  // namespace pocket
