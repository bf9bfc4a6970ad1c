// The segmenter: cuts a reply streamed as text into segments speech synthesis can speak one after
// another (docs/architecture.md, "Voice"). A segment ends at a sentence end (. ! ? followed by
// a space, the end of the reply, or a closing quote; 。！？；… at once), or, once it has grown
// past SegmenterOptions::comma_chars, at a comma, semicolon or colon; past max_chars at the last
// space (or anywhere in text without spaces). The first segment of a reply is cut early (at a
// comma once it holds first_min_chars, or at a space after first_max_words words) so that sound
// starts while the model is still writing. Numbers (3.14, 1,000), abbreviations (Dr., e.g., U.S.)
// and ellipses inside a sentence are kept whole. Works on UTF-8 and never cuts inside a
// character. Each segment remembers where it lies in the reply, so a reply interrupted after a
// segment played can be kept up to that point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pocket::voice {

struct SegmenterOptions {
  int32_t first_min_chars = 12;  // the first segment ends at a comma once this long
  int32_t first_max_words = 6;   // ... or after this many words
  int32_t first_max_chars = 40;  // ... or at a space (or anywhere) once this long
  int32_t comma_chars = 60;      // later segments end at a comma once this long
  int32_t max_chars = 160;       // any segment ends at a space (or anywhere) once this long
};

struct Segment {
  std::string text;  // trimmed of surrounding spaces
  size_t begin = 0;  // [begin, end): its bytes in the whole reply (untrimmed)
  size_t end = 0;
};

class Segmenter {
 public:
  explicit Segmenter(const SegmenterOptions& options = {}) : options_(options) {}

  // Appends streamed text; appends to `out` the segments it completes (a cut may wait for the
  // next character, which tells a sentence end from a decimal point or an abbreviation).
  void Push(std::string_view text, std::vector<Segment>& out);
  // The reply ended: what is left, as a last segment (none when it is only spaces).
  void Finish(std::vector<Segment>& out);
  // A new reply.
  void Reset();

  // The reply's text so far.
  const std::string& text() const { return text_; }

 private:
  // Scans from scan_ for a cut; returns its byte offset (the segment is [start_, cut)) or npos.
  size_t FindCut(bool final) const;
  void Emit(size_t cut, std::vector<Segment>& out);

  SegmenterOptions options_;
  std::string text_;  // the whole reply so far
  size_t start_ = 0;  // where the current segment starts
  int32_t emitted_ = 0;
};

// The byte length of the UTF-8 sequence that starts with `lead` (1 for a byte that cannot start
// one, so that invalid text still advances).
size_t Utf8Length(unsigned char lead);

}  // namespace pocket::voice
