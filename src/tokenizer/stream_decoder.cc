#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

// Moves the complete characters at the front of `pending` to the end of `out` (invalid sequences
// as U+FFFD) and leaves only the bytes of an unfinished final character in `pending`.
void TakeComplete(std::string* pending, std::string* out_text) {
  std::string& out = *out_text;
  size_t pos = 0;
  const std::string_view bytes = *pending;
  while (pos < bytes.size()) {
    const utf8::SequenceInfo info = utf8::Classify(bytes.substr(pos));
    if (info.kind == utf8::SequenceInfo::kIncomplete) break;
    if (info.kind == utf8::SequenceInfo::kComplete) {
      out.append(bytes.substr(pos, info.length));
    } else {
      out.append(utf8::kReplacementCharacter);
    }
    pos += info.length;
  }
  pending->erase(0, pos);
}

}  // namespace

std::string StreamDecoder::Push(int32_t id) {
  std::string out;
  PushTo(id, &out);
  return out;
}

void StreamDecoder::PushTo(int32_t id, std::string* out) {
  pending_.append(tokenizer_->DecodePiece(prev_id_, id));
  prev_id_ = id;
  TakeComplete(&pending_, out);
}

std::string StreamDecoder::Flush() {
  std::string out;
  TakeComplete(&pending_, &out);
  if (!pending_.empty()) out.append(utf8::kReplacementCharacter);  // one unfinished character
  Reset();
  return out;
}

}  // namespace pocket
