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

Status Constraint::Rollback(size_t n_tokens) {
  const size_t n = n_accepted();
  if (n_tokens > n) {
    return InvalidArgumentError("cannot roll back ", n_tokens, " tokens: only ", n,
                                " accepted since the start");
  }
  if (n_tokens > 0) RollbackTokens(n_tokens);
  return Status::Ok();
}

namespace {

class ChoiceConstraint final : public Constraint {
 public:
  ChoiceConstraint(const Tokenizer& tok, std::vector<std::string> choices)
      : tables_(std::make_shared<const Tables>(tok, std::move(choices))) {}

  void Reset() override {
    text_.clear();
    starts_.clear();
  }

  std::unique_ptr<Constraint> Clone() const override {
    return std::unique_ptr<Constraint>(new ChoiceConstraint(*this));
  }

  size_t n_accepted() const override { return starts_.size(); }

  const std::vector<int32_t>& Allowed() override {
    allowed_.clear();
    for (const std::string& c : tables_->choices) {
      if (c.size() <= text_.size() || c.compare(0, text_.size(), text_) != 0) continue;
      const std::string_view rest = std::string_view(c).substr(text_.size());
      for (size_t len = 1; len <= rest.size() && len <= tables_->max_token_bytes; ++len) {
        auto it = tables_->by_bytes.find(std::string(rest.substr(0, len)));
        if (it != tables_->by_bytes.end())
          allowed_.insert(allowed_.end(), it->second.begin(), it->second.end());
      }
    }
    std::sort(allowed_.begin(), allowed_.end());
    allowed_.erase(std::unique(allowed_.begin(), allowed_.end()), allowed_.end());
    return allowed_;
  }

  Status Accept(int32_t token) override {
    const Tokenizer& tok = *tables_->tok;
    const std::string_view bytes = tok.TokenBytes(token);
    const std::string next = text_ + std::string(bytes);
    for (const std::string& c : tables_->choices) {
      if (!bytes.empty() && !tok.IsSpecial(token) && c.size() >= next.size() &&
          c.compare(0, next.size(), next) == 0) {
        starts_.push_back(text_.size());
        text_ = next;
        return Status::Ok();
      }
    }
    return InvalidArgumentError("token ", token, " ", QuoteBytes(bytes),
                                " does not continue any of the choices after ", QuoteBytes(text_));
  }

  bool Complete() const override {
    const std::vector<std::string>& choices = tables_->choices;
    return std::find(choices.begin(), choices.end(), text_) != choices.end();
  }

 protected:
  void RollbackTokens(size_t n_tokens) override {
    const size_t keep = starts_.size() - n_tokens;
    text_.resize(starts_[keep]);
    starts_.resize(keep);
  }

 private:
  // Fixed when the constraint is made; shared by its clones.
  struct Tables {
    Tables(const Tokenizer& t, std::vector<std::string> c) : tok(&t), choices(std::move(c)) {
      // Tokens by their bytes (several ids may spell the same bytes). Special tokens are left out.
      for (int32_t id = 0; id < tok->vocab_size(); ++id) {
        if (tok->IsSpecial(id)) continue;
        const std::string_view bytes = tok->TokenBytes(id);
        if (bytes.empty()) continue;
        by_bytes[std::string(bytes)].push_back(id);
        max_token_bytes = std::max(max_token_bytes, bytes.size());
      }
    }
    const Tokenizer* tok;
    std::vector<std::string> choices;
    std::unordered_map<std::string, std::vector<int32_t>> by_bytes;
    size_t max_token_bytes = 0;
  };

  ChoiceConstraint(const ChoiceConstraint&) = default;

  std::shared_ptr<const Tables> tables_;
  std::string text_;              // bytes accepted so far
  std::vector<size_t> starts_;    // per accepted token: text_.size() before it
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
