// Turns generated tokens into text pieces for streaming: whole UTF-8 characters only (through
// StreamDecoder), and never any part of a stop string: text that could be the start of a stop
// string is held back until it is known not to be one.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pocket {

class TextStream {
 public:
  TextStream(const Tokenizer* tokenizer, std::vector<std::string> stop_strings)
      : decoder_(tokenizer), stop_strings_(std::move(stop_strings)) {}

  // Room for `bytes` of text, so pushing tokens allocates nothing until it is exceeded.
  void Reserve(size_t bytes) { text_.reserve(bytes); }
  // Appends the token's text; `piece` receives what may be shown now. Returns true when a stop
  // string appeared: `piece` then ends just before it and the stream is finished.
  bool Push(int32_t token, std::string* piece);
  // The context's last token, before the first Push (StreamDecoder::Follow).
  void Follow(int32_t token) { decoder_.Follow(token); }
  // What was held back (at the end of generation).
  std::string Flush();

 private:
  bool Scan(std::string* piece);

  StreamDecoder decoder_;
  std::vector<std::string> stop_strings_;
  std::string text_;    // all text so far
  size_t emitted_ = 0;  // bytes of text_ already returned
  bool finished_ = false;
};

}  // namespace pocket
