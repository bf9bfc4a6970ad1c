// JSON numbers under JSON Schema numeric keywords (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, multipleOf, type "integer"), as grammar rules.
//
// Unbounded numbers are plain static rules. Bounded ones are a lazy rule family whose payload is
// the number text so far: each expansion offers the next characters that keep the text a viable
// prefix (some completion within the length limit satisfies every bound) and the end of the
// number when the text itself satisfies them. Both decisions use exact decimal arithmetic on the
// digit strings, never floating point, so a rule neither admits a value outside the bounds nor
// leads generation into a prefix it cannot finish.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "generate/grammar.h"

namespace pocket {

// The numeric keywords of a JSON Schema, as decimal strings ("-1.5", "0.0001",
// "18446744073709551615"; an exponent such as "1e-3" is accepted too, |exponent| <= 1000).
struct NumberBounds {
  bool integer = false;  // JSON Schema "integer": the value has no fractional part
  std::optional<std::string> minimum, maximum, exclusive_minimum, exclusive_maximum;
  std::optional<std::string> multiple_of;  // must be > 0
};

// The longest number text a bounded rule produces (sign included): room for 1e308 written out.
inline constexpr size_t kMaxNumberChars = 400;

// Adds a rule matching JSON number texts in plain decimal notation, -?(0|[1-9][0-9]*)(\.[0-9]+)?
// with no exponent, whose value satisfies the bounds exactly. With `integer` the text has no
// fraction part ("1" only: the canonical text of 1.0). Bounded rules match at most
// kMaxNumberChars characters; a rule whose bounds admit no value matches nothing. Errors: a bound
// that is not a decimal number, a multiple_of that is not positive.
StatusOr<uint32_t> AddNumberRule(Grammar* grammar, const NumberBounds& bounds);

}  // namespace pocket
