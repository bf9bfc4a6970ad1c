#include "base/json_nesting.h"

namespace pocket {

int32_t JsonNestingDepth(std::string_view text, int32_t limit) {
  int32_t depth = 0;
  int32_t deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Status CheckJsonNesting(std::string_view text, std::string_view what, int32_t limit) {
  if (JsonNestingDepth(text, limit) > limit) {
    return InvalidArgumentError(what, " nests deeper than ", limit,
                                " levels of arrays and objects (the limit)");
  }
  return Status::Ok();
}

}  // namespace pocket
