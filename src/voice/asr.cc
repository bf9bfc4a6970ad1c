#include "voice/asr.h"

#include <pocketsphinx.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>
#include <vector>

#include "base/str.h"

namespace pocket::voice {
namespace {

class PocketSphinx final : public Recognizer {
 public:
  PocketSphinx(cmd_ln_t* config, ps_decoder_t* ps) : config_(config), ps_(ps) {}
  ~PocketSphinx() override {
    if (started_) ps_end_utt(ps_);
    ps_free(ps_);
    cmd_ln_free_r(config_);
  }

  Status Start() override {
    if (started_) ps_end_utt(ps_);
    started_ = false;
    if (ps_start_utt(ps_) < 0) return InternalError("pocketsphinx cannot start an utterance");
    started_ = true;
    return Status::Ok();
  }

  Status Push(std::span<const int16_t> samples) override {
    if (!started_) return FailedPreconditionError("no utterance started");
    if (samples.empty()) return Status::Ok();
    if (ps_process_raw(ps_, samples.data(), samples.size(), FALSE, FALSE) < 0) {
      return InternalError("pocketsphinx failed on the audio");
    }
    return Status::Ok();
  }

  std::string Partial() override {
    if (!started_) return "";
    int32 score = 0;
    const char* hyp = ps_get_hyp(ps_, &score);
    return hyp != nullptr ? hyp : "";
  }

  StatusOr<std::string> Finish() override {
    if (!started_) return FailedPreconditionError("no utterance started");
    started_ = false;
    if (ps_end_utt(ps_) < 0) return InternalError("pocketsphinx cannot end the utterance");
    int32 score = 0;
    const char* hyp = ps_get_hyp(ps_, &score);
    return std::string(hyp != nullptr ? hyp : "");
  }

 private:
  cmd_ln_t* config_;
  ps_decoder_t* ps_;
  bool started_ = false;
};

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '\'' || c >= 0x80) {
      word += static_cast<char>(std::tolower(c));
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

}  // namespace

StatusOr<std::unique_ptr<Recognizer>> CreatePocketSphinx(const PocketSphinxOptions& options) {
  const std::string dir =
      options.model_dir.empty() ? "/usr/share/pocketsphinx/model/en-us" : options.model_dir;
  const std::string hmm = dir + "/en-us";
  const std::string lm = dir + "/en-us.lm.bin";
  const std::string dict = dir + "/cmudict-en-us.dict";
  for (const std::string& path : {hmm, lm, dict}) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return NotFoundError("the pocketsphinx model is not there: ", path,
                           " (Debian: apt install pocketsphinx-en-us)");
    }
  }
  // One pass (-fwdflat no): the flat second pass runs at the utterance's end over all of it,
  // seconds on a busy phone-class core, where the tree pass has kept up as the audio came.
  cmd_ln_t* config = cmd_ln_init(nullptr, ps_args(), TRUE, "-hmm", hmm.c_str(), "-lm", lm.c_str(),
                                 "-dict", dict.c_str(), "-logfn", "/dev/null", "-fwdflat",
                                 options.second_pass ? "yes" : "no", nullptr);
  if (config == nullptr) return InternalError("pocketsphinx rejected its configuration");
  ps_decoder_t* ps = ps_init(config);
  if (ps == nullptr) {
    cmd_ln_free_r(config);
    return InternalError("pocketsphinx cannot load its model from ", dir);
  }
  auto recognizer = std::make_unique<PocketSphinx>(config, ps);
  if (!options.warm_up.empty()) {
    POCKET_RETURN_IF_ERROR(recognizer->Start());
    POCKET_RETURN_IF_ERROR(recognizer->Push(options.warm_up));
    POCKET_RETURN_IF_ERROR(recognizer->Finish().status());
  }
  return std::unique_ptr<Recognizer>(std::move(recognizer));
}

double WordErrorRate(const std::string& reference, const std::string& hypothesis, int64_t* errors,
                     int64_t* words) {
  const std::vector<std::string> r = Words(reference);
  const std::vector<std::string> h = Words(hypothesis);
  // Levenshtein distance over words, one row at a time.
  std::vector<int64_t> prev(h.size() + 1);
  std::vector<int64_t> cur(h.size() + 1);
  for (size_t j = 0; j <= h.size(); ++j) prev[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= r.size(); ++i) {
    cur[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= h.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r[i - 1] == h[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  const int64_t e = prev[h.size()];
  if (errors != nullptr) *errors = e;
  if (words != nullptr) *words = static_cast<int64_t>(r.size());
  if (r.empty()) return h.empty() ? 0.0 : 1.0;
  return static_cast<double>(e) / static_cast<double>(r.size());
}

}  // namespace pocket::voice
