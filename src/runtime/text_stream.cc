#include "runtime/text_stream.h"

#include <algorithm>

namespace pocket {

bool TextStream::Push(int32_t token, std::string* piece) {
  piece->clear();
  if (finished_) return true;
  decoder_.PushTo(token, &text_);
  return Scan(piece);
}

bool TextStream::Scan(std::string* piece) {
  // A stop string can only newly appear in the unemitted tail (plus the held-back bytes).
  size_t stop_at = std::string::npos;
  for (const std::string& s : stop_strings_) {
    if (s.empty()) continue;
    const size_t from = emitted_ >= s.size() ? emitted_ - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && at < stop_at) stop_at = at;
  }
  if (stop_at != std::string::npos) {
    if (stop_at > emitted_) piece->assign(text_, emitted_, stop_at - emitted_);
    emitted_ = text_.size();
    finished_ = true;
    return true;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stop_strings_) {
    for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), text_.size() - emitted_); len > hold;
         --len) {
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  const size_t safe_end = text_.size() - hold;
  if (safe_end > emitted_) {
    piece->assign(text_, emitted_, safe_end - emitted_);
    emitted_ = safe_end;
  }
  return false;
}

std::string TextStream::Flush() {
  if (finished_) return "";
  text_ += decoder_.Flush();
  std::string rest = text_.substr(emitted_);
  emitted_ = text_.size();
  finished_ = true;
  return rest;
}

}  // namespace pocket
