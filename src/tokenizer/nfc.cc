// NFC normalization with a fast path: most text (ASCII, CJK, kana, emoji, punctuation) cannot
// change under NFC, so we only hand the chunks that might to utf8proc.
#include <utf8proc.h>

#include <cstdlib>
#include <new>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace unicode {
namespace {

// NFC of a run that contains no HF-opaque characters.
void AppendUtf8procNfc(std::string_view run, std::string* out) {
  if (run.empty()) return;
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    // The input is valid UTF-8, so the only possible failure is running out of memory.
    std::free(result);
    throw std::bad_alloc();
  }
  out->append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  std::free(result);
}

// NFC of a chunk that needs normalization: HF-opaque characters are starters that interact with
// nothing, so the runs between them are normalized independently.
void AppendDirtyChunk(std::string_view chunk, std::string* out) {
  size_t run_start = 0;
  size_t pos = 0;
  while (pos < chunk.size()) {
    const size_t char_start = pos;
    const char32_t cp = utf8::DecodeAt(chunk, &pos);
    if (IsNfcOpaqueForHf(cp)) {
      AppendUtf8procNfc(chunk.substr(run_start, char_start - run_start), out);
      out->append(chunk.substr(char_start, pos - char_start));
      run_start = pos;
    }
  }
  AppendUtf8procNfc(chunk.substr(run_start), out);
}

}  // namespace

void AppendNfc(std::string_view text, std::string* out) {
  // An ASCII character is a starter that never composes with what precedes it, so NFC(X + a + Y)
  // = NFC(X) + NFC(a + Y): chunks start at ASCII characters and are normalized independently.
  size_t copied = 0;       // text[0, copied) has been appended
  size_t chunk_start = 0;  // start of the current chunk
  bool dirty = false;      // the current chunk holds a character that may change
  size_t pos = 0;
  const size_t size = text.size();
  while (pos < size) {
    const auto byte = static_cast<uint8_t>(text[pos]);
    if (byte < 0x80) {
      if (dirty) {
        out->append(text.substr(copied, chunk_start - copied));
        AppendDirtyChunk(text.substr(chunk_start, pos - chunk_start), out);
        copied = pos;
        dirty = false;
      }
      chunk_start = pos;
      ++pos;
      continue;
    }
    const char32_t cp = utf8::DecodeAt(text, &pos);
    if (!dirty && !IsNfcInert(cp)) dirty = true;
  }
  if (dirty) {
    out->append(text.substr(copied, chunk_start - copied));
    AppendDirtyChunk(text.substr(chunk_start), out);
  } else {
    out->append(text.substr(copied));
  }
}

}  // namespace unicode

std::string NormalizeNfc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  unicode::AppendNfc(text, &out);
  return out;
}

}  // namespace pocket
