#include "generate/constraint.h"

#include <algorithm>

namespace pocket {

size_t Constraint::AllowedMask(std::vector<uint64_t>* mask) {
  const std::vector<int32_t>& allowed = Allowed();
  int32_t max_id = -1;
  for (int32_t id : allowed) max_id = std::max(max_id, id);
  mask->assign(static_cast<size_t>(max_id + 64) / 64, 0);
  for (int32_t id : allowed) (*mask)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  return allowed.size();
}

namespace {

class ChoiceConstraint final : public Constraint {
 public:
  ChoiceConstraint(const Tokenizer& tok, std::vector<std::string> choices)
      : tok_(&tok), choices_(std::move(choices)) {
    // Tokens by their bytes (several ids may spell the same bytes). Special tokens are left out.
    for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
      if (tok_->IsSpecial(id)) continue;
      const std::string_view bytes = tok_->TokenBytes(id);
      if (bytes.empty()) continue;
      by_bytes_[std::string(bytes)].push_back(id);
      max_token_bytes_ = std::max(max_token_bytes_, bytes.size());
    }
  }

  void Reset() override { text_.clear(); }

  const std::vector<int32_t>& Allowed() override {
    allowed_.clear();
    for (const std::string& c : choices_) {
      if (c.size() <= text_.size() || c.compare(0, text_.size(), text_) != 0) continue;
      const std::string_view rest = std::string_view(c).substr(text_.size());
      for (size_t len = 1; len <= rest.size() && len <= max_token_bytes_; ++len) {
        auto it = by_bytes_.find(std::string(rest.substr(0, len)));
        if (it != by_bytes_.end())
          allowed_.insert(allowed_.end(), it->second.begin(), it->second.end());
      }
    }
    std::sort(allowed_.begin(), allowed_.end());
    allowed_.erase(std::unique(allowed_.begin(), allowed_.end()), allowed_.end());
    return allowed_;
  }

  Status Accept(int32_t token) override {
    const std::string_view bytes = tok_->TokenBytes(token);
    const std::string next = text_ + std::string(bytes);
    for (const std::string& c : choices_) {
      if (!bytes.empty() && !tok_->IsSpecial(token) && c.size() >= next.size() &&
          c.compare(0, next.size(), next) == 0) {
        text_ = next;
        return Status::Ok();
      }
    }
    return InvalidArgumentError("token ", token, " ", QuoteBytes(bytes),
                                " does not continue any of the choices after ", QuoteBytes(text_));
  }

  bool Complete() const override {
    return std::find(choices_.begin(), choices_.end(), text_) != choices_.end();
  }

 private:
  const Tokenizer* tok_;
  std::vector<std::string> choices_;
  std::unordered_map<std::string, std::vector<int32_t>> by_bytes_;
  size_t max_token_bytes_ = 0;
  std::string text_;              // bytes accepted so far
  std::vector<int32_t> allowed_;  // reused
};

}  // namespace

StatusOr<std::unique_ptr<Constraint>> MakeChoiceConstraint(const Tokenizer& tokenizer,
                                                           std::vector<std::string> choices) {
  if (choices.empty()) return InvalidArgumentError("a choice constraint needs at least one choice");
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) return InvalidArgumentError("choice ", i, " is empty");
    auto ids = tokenizer.Encode(choices[i]);  // validates UTF-8 and proves it is spellable
    if (!ids.ok()) return InvalidArgumentError("choice ", i, ": ", ids.status().message());
  }
  return std::unique_ptr<Constraint>(new ChoiceConstraint(tokenizer, std::move(choices)));
}

}  // namespace pocket
