// How deep a JSON text nests, found by one pass over its bytes without parsing or recursing, so
// that a hostile text (a request body, a schema, tool parameters) is refused before anything
// recurses over it: nlohmann::json parses iteratively, but copying, comparing or compiling a
// parsed value recurses once per level, and 200,000 levels of `[` overflow a thread's stack.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace pocket {

// The nesting limit for JSON from outside (HTTP bodies, JSON Schemas, tool parameters), in levels
// of arrays and objects: {"a": [1]} is 2 deep. A request with a schema inside nests that schema
// 3 or 4 levels down; a schema's property nests 2 levels per property level.
inline constexpr int32_t kMaxJsonNesting = 64;

// The deepest level of `[` / `{` in `text` (brackets inside strings, escaped quotes included, do
// not count); stops counting at limit + 1. Malformed text gives whatever depth it reaches: the
// parser reports the syntax.
int32_t JsonNestingDepth(std::string_view text, int32_t limit = kMaxJsonNesting);

// InvalidArgument "<what> nests deeper than <limit> levels of arrays and objects (the limit)"
// when it does; Ok otherwise.
Status CheckJsonNesting(std::string_view text, std::string_view what,
                        int32_t limit = kMaxJsonNesting);

}  // namespace pocket
