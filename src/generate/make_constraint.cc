// MakeConstraint: from a ConstraintSpec (CLI flags, C API fields) to a constraint.
#include "generate/constraint.h"
#include "generate/gbnf.h"
#include "generate/grammar.h"
#include "generate/json_schema.h"

namespace pocket {

StatusOr<std::unique_ptr<Constraint>> MakeConstraint(const Tokenizer& tokenizer,
                                                     const ConstraintSpec& spec) {
  const int kinds = !spec.choices.empty() + !spec.regex.empty() + !spec.json_schema.empty() +
                    !spec.grammar.empty();
  if (kinds > 1) {
    return InvalidArgumentError(
        "give one constraint: choices, a regular expression, a JSON schema or a grammar");
  }
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
    POCKET_ASSIGN_OR_RETURN(grammar, CompileJsonSchema(spec.json_schema, o));
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
