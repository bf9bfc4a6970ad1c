// JSON Schema (a documented subset of draft 2020-12) compiled to a Grammar whose sentences are
// JSON texts of the instances the schema accepts.
//
// Canonical form (CanonicalJson below): every instance has exactly one canonical text:
//   - no whitespace;
//   - object members in the order nlohmann::json keeps them (byte-wise sorted keys);
//   - strings with the escaping of SpanEscaping::kJsonString: `"` as \", `\` as \\, U+0008/0009/
//     000A/000C/000D as \b \t \n \f \r, other code points below U+0020 as \u00xx (lower-case hex),
//     everything else as raw UTF-8;
//   - numbers in plain decimal, never with an exponent: integers as their digits; floats as the
//     shortest decimal that reads back as the same double, written out without an exponent
//     (1e-7 -> 0.0000001, 1e308 -> 1 and 308 zeros); a float with an integral value is written
//     as an integer (1.0 -> 1), zero (also -0.0) as 0.
// The grammar accepts the canonical text of every valid instance whose numbers keep to the limits
// of json_number.h (at most 17 significant digits, 0 or 1e-6 <= |x| < 1e21: a model cannot run
// on writing one number; enum and const values are exempt: they are checked against the other
// keywords by their exact value, numbers nested in them too, and written as their canonical text,
// so {"type": "number", "const": 1e-7} gives 0.0000001) and no text of an invalid one (the
// conformance driver in json_schema_test.cc checks this on the official test suite). It also
// accepts other spellings of valid values: one optional space after each `:` and `,`, object
// members in any order, numbers with trailing fraction zeros. No other whitespace, no exponents,
// no non-canonical string escapes (\/ or \u0041).
//
// Supported keywords:
//   type (a name or an array of names: nullable types are ["T", "null"]), enum, const, boolean
//     schemas;
//   minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf (exact decimal arithmetic);
//   minLength, maxLength (code points), pattern (the regular-expression subset of
//     MakeRegexConstraint, unanchored unless it starts with ^ / ends with $), format (asserted):
//     date, time, date-time (RFC 3339; leap seconds are not accepted), email, uuid;
//     pattern, format and lengths combine only as minLength/maxLength with a span;
//   items (a schema or false), prefixItems, minItems, maxItems;
//   properties, required, additionalProperties (false, true or a schema): members in any order,
//     each declared property at most once; duplicate *additional* keys cannot be excluded;
//   anyOf; allOf and sibling keywords next to anyOf / oneOf / $ref, merged when the schemas share
//     no keyword (otherwise unsupported); oneOf where the branches provably match disjoint sets
//     (different types or different const/enum values);
//   $ref to this document ("#" and JSON pointers; recursion allowed), $defs, definitions;
//   annotations (ignored): $schema, $id (at the root only), $comment, title, description,
//     default, examples, deprecated, readOnly, writeOnly, contentEncoding, contentMediaType;
//     no-ops: uniqueItems: false, minContains / maxContains without contains;
//   spans (pocket's extension): a string schema with "x-pocket-span": true, or a string property
//     whose name is in JsonSchemaOptions::span_fields, must be a substring of the span source
//     (minLength / maxLength bound it).
// Anything else is an error "unsupported JSON Schema keyword "K" at #/pointer: reason", so no
// keyword is ever silently ignored.
//
// Unsatisfiable schemas are errors too, "unsatisfiable JSON Schema keyword "K" at #/pointer:
// reason", found when compiling, never as a dead end in the middle of generation:
//   - keywords that contradict each other for a type the schema allows: minLength > maxLength
//     (or a span source shorter than minLength), minItems > maxItems, numeric bounds no number
//     meets (minimum > maximum, exclusive bounds leaving no room, no integer or no multiple of
//     multipleOf in the range, bounds outside the limits of json_number.h unless enum or const
//     lists the values);
//     an error wherever they stand, even when another type remains (["string", "null"] with
//     minLength 5 and maxLength 3), except in an anyOf / oneOf branch;
//   - a schema location that matches no value at all: "type": [], an empty enum, an enum or const
//     none of whose values the rest of the schema accepts (e.g. the wrong type), allOf parts with
//     no type in common, a required property that properties makes false or that
//     additionalProperties: false forbids, minItems beyond what prefixItems / items: false allow,
//     an anyOf / oneOf every branch of which is unsatisfiable (one branch alone may be), a $ref to
//     such a schema. The root and every subschema (properties, items, prefixItems,
//     additionalProperties, $ref targets) are checked, each with its own pointer; a subschema
//     written as the boolean `false` is deliberate and allowed except at the root.
// A recursive schema with no finite instance (a required property that refers back to its own
// object) is not detected.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "generate/grammar.h"

namespace pocket {

struct JsonSchemaOptions {
  // Source text for span fields: string schemas with "x-pocket-span": true, and string
  // properties named in `span_fields`, must be substrings of it.
  std::string span_source;
  bool has_span_source = false;
  std::vector<std::string> span_fields;
};

// The most grammar rules, and elements in their alternatives, one schema may compile to (a plain
// schema needs a few rules and ~100-200 elements per property; 1,000,000 elements are ~25 MB).
inline constexpr size_t kMaxJsonSchemaRules = 100000;
inline constexpr size_t kMaxJsonSchemaElements = 1000000;

// Compiles a schema given as JSON text. Unsupported keywords are an error naming the keyword and
// its JSON pointer; a malformed schema is InvalidArgument, and so is one that nests deeper than
// kMaxJsonNesting (base/json_nesting.h) levels of arrays and objects or compiles to more than
// kMaxJsonSchemaRules rules or kMaxJsonSchemaElements elements.
StatusOr<std::unique_ptr<Grammar>> CompileJsonSchema(std::string_view schema_json,
                                                     const JsonSchemaOptions& options = {});

// The grammar of a list of the schema's values (JsonList, generate/constraint.h): the schema's
// grammar under a root that repeats it. An empty list is the schema's grammar alone; a list's
// texts must be valid UTF-8 and max_values within 0 to kMaxJsonListValues.
inline constexpr int32_t kMaxJsonListValues = 1000;
StatusOr<std::unique_ptr<Grammar>> CompileJsonSchemaList(std::string_view schema_json,
                                                         const JsonList& list,
                                                         const JsonSchemaOptions& options = {});

// The canonical text of a JSON value (see above). NaN and infinities are written as null.
std::string CanonicalJson(const nlohmann::json& value);

// Every unsupported-keyword message starts with this.
inline constexpr std::string_view kUnsupportedKeywordPrefix = "unsupported JSON Schema keyword \"";
// Every unsatisfiable-schema message starts with this (then ' keyword "K" at #/pointer: ...', or
// ' at #: the schema is false' for the root).
inline constexpr std::string_view kUnsatisfiablePrefix = "unsatisfiable JSON Schema";

}  // namespace pocket
