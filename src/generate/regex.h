// The regular-expression compiler shared by the regex constraint and the JSON Schema `pattern`
// and `format` keywords: a pattern (the subset documented at MakeRegexConstraint) becomes a
// Thompson NFA over Unicode code points.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"

namespace pocket {

// An inclusive range of code points.
struct CharRange {
  char32_t lo, hi;
};

struct RegexNfa {
  // A state is a character transition (`ranges` non-empty, sorted and disjoint, to `next`) or up
  // to two epsilon moves (`eps`, -1 when absent).
  struct State {
    std::vector<CharRange> ranges;
    int next = -1;
    int eps[2] = {-1, -1};
  };
  std::vector<State> states;
  int start = 0;
  int accept = 0;  // the one accepting state (an epsilon state with no moves)
};

// Compiles `pattern` (matched as a whole: anchors implied). Errors name the offset.
StatusOr<RegexNfa> CompileRegexNfa(std::string_view pattern);

}  // namespace pocket
