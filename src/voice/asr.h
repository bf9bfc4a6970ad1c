// Speech recognition for the voice pipeline: an utterance streamed in as 16 kHz PCM while the user
// speaks (so that little is left to do at its end), partial hypotheses on the way, the final one
// at the end. pocketsphinx (Debian's libpocketsphinx, model pocketsphinx-en-us) behind a small
// interface an app can replace.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace pocket::voice {

class Recognizer {
 public:
  virtual ~Recognizer() = default;
  // A new utterance.
  virtual Status Start() = 0;
  // More of it (16 kHz mono).
  virtual Status Push(std::span<const int16_t> samples) = 0;
  // The best hypothesis so far (empty: none yet).
  virtual std::string Partial() = 0;
  // The utterance ended: its final hypothesis (empty when nothing was recognized).
  virtual StatusOr<std::string> Finish() = 0;
};

struct PocketSphinxOptions {
  // The model directory holding en-us/ (the acoustic model), en-us.lm.bin and
  // cmudict-en-us.dict; empty: Debian's /usr/share/pocketsphinx/model/en-us.
  std::string model_dir;
  // Decoded once at creation, so that the first utterance starts with adapted cepstral means
  // like the later ones (16 kHz mono; empty: none).
  std::span<const int16_t> warm_up;
  // pocketsphinx's flat second pass at the end of each utterance: a little more accurate, but it
  // decodes the whole utterance again when the user stops speaking.
  bool second_pass = false;
};

StatusOr<std::unique_ptr<Recognizer>> CreatePocketSphinx(const PocketSphinxOptions& options);

// Word error rate of `hypothesis` against `reference`: word-level edit distance over the
// reference's word count, words compared lowercase without punctuation.
double WordErrorRate(const std::string& reference, const std::string& hypothesis,
                     int64_t* errors = nullptr, int64_t* words = nullptr);

}  // namespace pocket::voice
