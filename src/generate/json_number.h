// JSON numbers under JSON Schema numeric keywords (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, multipleOf, type "integer"), as grammar rules.
//
// What a double holds, written without an exponent. Every number rule, bounded or not, accepts
// only texts within these limits, so a looping model cannot spend its token budget on one number
// ("0.000000...", "-3000000...", "1111..."):
//   - at most 17 significant digits (a double's precision): the digits from the first non-zero
//     one to the last one written, except the zeros that end an integer written without a
//     fraction ("1" and 20 zeros is 1e20: one significant digit); trailing fraction zeros count
//     ("1.50" has three);
//   - at most 21 integer digits: |x| < 1e21;
//   - at most 5 zeros right after "0.": a non-zero |x| is at least 0.000001 (1e-6), and zero
//     has at most 5 fraction digits.
// The exponent of a number is the length of its zero runs here (the canonical form has no
// exponent), so bounding the exponent bounds the text: at most kMaxNumberChars characters. The
// window 1e-6 <= |x| < 1e21 is where JavaScript (Number.prototype.toString) writes plain decimals;
// a schema whose bounds leave no number inside it is refused (FindNumberConflict), and the
// canonical text of any other value, e.g. 1e-7 or 1e21, is not accepted by a number rule -- except
// one made with NumberLimits::kNone, which checks given texts (enum and const values) by value.
//
// Unbounded numbers are plain static rules. Bounded ones are a lazy rule family whose payload is
// the number text so far: each expansion offers the next characters that keep the text a viable
// prefix (some completion within the rule above satisfies every bound) and the end of the
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

// The limits above.
inline constexpr int kMaxSignificantDigits = 17;
inline constexpr int kMaxIntegerDigits = 21;
inline constexpr int kMaxLeadingFractionZeros = 5;
// The longest number text a rule accepts: "-0.", 5 zeros and 17 digits.
inline constexpr size_t kMaxNumberChars = 3 + kMaxLeadingFractionZeros + kMaxSignificantDigits;

// Whether a number rule keeps to the limits above.
enum class NumberLimits {
  // The limits: for generation.
  kGenerate,
  // None: any plain decimal text, however long (1e-7 as 0.0000001, 1e308 written out), whose
  // value satisfies the bounds. For checking given texts against a schema, such as the canonical
  // text of an enum or const value (pointless to bound: it is written as given). The bounded rule
  // offers every syntactically valid next character, whether a completion within the bounds
  // exists or not, so it is not for generation.
  kNone,
};

// Adds a rule matching JSON number texts in plain decimal notation, -?(0|[1-9][0-9]*)(\.[0-9]+)?
// with no exponent, within the limits above (unless `limits` is kNone), whose value satisfies the
// bounds exactly. With `integer` the text has no fraction part ("1" only: the canonical text of
// 1.0). A rule whose bounds admit no value matches nothing (FindNumberConflict says why, given the
// same `limits`). Errors: a bound that is not a decimal number, a multiple_of that is not positive.
StatusOr<uint32_t> AddNumberRule(Grammar* grammar, const NumberBounds& bounds,
                                 NumberLimits limits = NumberLimits::kGenerate);

// Why no number text of AddNumberRule's satisfies `bounds`: the keyword to blame (the binding
// lower or upper bound, or "multipleOf") and a sentence naming the bounds involved, e.g.
// {"minimum", "minimum 5 is greater than maximum 4"}. Empty when some number does. Errors as
// AddNumberRule's.
struct NumberConflict {
  std::string keyword;
  std::string reason;
};
StatusOr<std::optional<NumberConflict>> FindNumberConflict(
    const NumberBounds& bounds, NumberLimits limits = NumberLimits::kGenerate);

}  // namespace pocket
