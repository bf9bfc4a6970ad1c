#include "runtime/request.h"

#include <cmath>
#include <random>
#include <string_view>
#include <utility>

#include "base/rng.h"
#include "base/str.h"
#include "base/timer.h"
#include "runtime/block_drafter.h"
#include "runtime/candidates.h"
#include "runtime/draft_model.h"
#include "tokenizer/added_tokens.h"

namespace pocket {
namespace {

// UTF-8 of a code point in the Basic Multilingual Plane above U+07FF (three bytes).
std::string Utf8Bmp(uint32_t cp) {
  std::string s;
  s += static_cast<char>(0xE0 | (cp >> 12));
  s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

// The control-token strings of the tokenizer: those Encode recognises only with parse_special.
struct ControlTokens {
  std::vector<std::string> texts;
  std::vector<int32_t> ids;
  AddedTokenMatcher matcher;  // its ids index `texts` and `ids`
};

ControlTokens FindControlTokens(const Tokenizer& tokenizer) {
  ControlTokens out;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.IsSpecial(id)) continue;
    const std::string_view text = tokenizer.TokenBytes(id);
    if (text.empty()) continue;
    out.matcher.Add(text, static_cast<int32_t>(out.texts.size()), true);
    out.texts.emplace_back(text);
    out.ids.push_back(id);
  }
  out.matcher.Finalize();
  return out;
}

// A private-use character that occurs in none of the messages' content; it delimits placeholders.
StatusOr<std::string> PickMarker(const std::vector<ChatMessage>& messages) {
  for (uint32_t cp = 0xE000; cp <= 0xF8FF; ++cp) {
    const std::string marker = Utf8Bmp(cp);
    bool used = false;
    for (const ChatMessage& m : messages)
      used = used || m.content.find(marker) != std::string::npos;
    if (!used) return marker;
  }
  return InvalidArgumentError("the messages use every private-use character U+E000..U+F8FF");
}

// Each control-token string in `text` becomes marker + its index + marker.
std::string Hide(std::string_view text, const ControlTokens& controls, const std::string& marker) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedTokenMatcher::Match m = controls.matcher.FindNext(text, pos, true);
    out.append(text.substr(pos, m.begin - pos));
    if (m.length == 0) break;
    out.append(marker).append(std::to_string(m.id)).append(marker);
    pos = m.begin + m.length;
  }
  return out;
}

// Undoes Hide.
std::string Restore(std::string_view text, const ControlTokens& controls,
                    const std::string& marker) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(marker, pos);
    if (open == std::string_view::npos) break;
    const size_t digits = open + marker.size();
    const size_t close = text.find(marker, digits);
    if (close == std::string_view::npos) break;  // not ours (cannot happen: see PickMarker)
    out.append(text.substr(pos, open - pos));
    out.append(controls.texts[std::stoul(std::string(text.substr(digits, close - digits)))]);
    pos = close + marker.size();
  }
  out.append(text.substr(pos));
  return out;
}

// The model's chat template; `no_template` (or the neutral wording) when it has none.
StatusOr<ChatTemplate> ModelChatTemplate(const Model& model, const Tokenizer& tokenizer,
                                         const std::string& no_template) {
  if (tokenizer.spec().chat_template.empty()) {
    if (!no_template.empty()) return FailedPreconditionError(no_template);
    return FailedPreconditionError(model.source().path(),
                                   " has no chat template, so it cannot format messages");
  }
  return ChatTemplate::Detect(tokenizer.spec().chat_template);
}

}  // namespace

StatusOr<PromptTokens> EncodePrompt(const Tokenizer& tokenizer, std::string_view text,
                                    bool parse_special) {
  EncodeOptions options;
  options.parse_special = parse_special;
  options.add_bos = tokenizer.spec().add_bos;
  PromptTokens out;
  POCKET_ASSIGN_OR_RETURN(out.ids, tokenizer.Encode(text, options));
  out.candidate_context = std::string(text);
  return out;
}

StatusOr<PromptTokens> EncodeChat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                  const std::vector<ChatMessage>& messages,
                                  const ChatOptions& options, bool parse_special) {
  if (parse_special) {
    POCKET_ASSIGN_OR_RETURN(std::string text, chat_template.Apply(messages, options));
    return EncodePrompt(tokenizer, text, true);
  }
  const ControlTokens controls = FindControlTokens(tokenizer);
  POCKET_ASSIGN_OR_RETURN(std::string marker, PickMarker(messages));
  std::vector<ChatMessage> hidden = messages;
  for (ChatMessage& m : hidden) m.content = Hide(m.content, controls, marker);
  // Control tokens left in the rendering are the template's own.
  POCKET_ASSIGN_OR_RETURN(std::string rendered, chat_template.Apply(hidden, options));
  PromptTokens out;
  if (tokenizer.spec().add_bos && tokenizer.spec().bos_id >= 0) {
    out.ids.push_back(tokenizer.spec().bos_id);
  }
  EncodeOptions plain;
  plain.parse_special = false;
  const std::string_view text = rendered;
  size_t pos = 0;
  while (true) {
    const AddedTokenMatcher::Match m = controls.matcher.FindNext(text, pos, true);
    std::string piece = Restore(text.substr(pos, m.begin - pos), controls, marker);
    POCKET_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(piece, plain));
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    if (m.length == 0) {
      out.candidate_context = std::move(piece);
      break;
    }
    out.ids.push_back(controls.ids[static_cast<size_t>(m.id)]);
    pos = m.begin + m.length;
  }
  return out;
}

uint64_t DrawSeed(SeedBits bits) {
  std::random_device device;
  if (bits == SeedBits::k32) return static_cast<uint64_t>(device());
  // Never UINT64_MAX, so that a reported seed always reproduces the run where that value means
  // "random".
  uint64_t seed = UINT64_MAX;
  while (seed == UINT64_MAX) {
    seed = (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
  }
  return seed;
}

StatusOr<PromptTokens> EncodeRequestPrompt(const Model& model, const PromptRequest& request) {
  const Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) {
    if (!request.wording.no_tokenizer.empty()) {
      return FailedPreconditionError(request.wording.no_tokenizer);
    }
    return FailedPreconditionError(model.source().path(), " has no tokenizer");
  }
  const int n_inputs =
      request.prompt.has_value() + request.prompt_tokens.has_value() + request.messages.has_value();
  if (n_inputs != 1) {
    return InvalidArgumentError("give exactly one of a prompt, prompt tokens and messages, got ",
                                n_inputs == 0 ? "none" : "more than one");
  }
  if (request.prompt.has_value()) {
    return EncodePrompt(*tok, *request.prompt, request.parse_special);
  }
  if (request.prompt_tokens.has_value()) {
    const int32_t vocab = model.config().vocab_size;
    for (size_t i = 0; i < request.prompt_tokens->size(); ++i) {
      const int32_t id = (*request.prompt_tokens)[i];
      if (id < 0 || id >= vocab) {
        return InvalidArgumentError("prompt token ", i, " is ", id, ", outside the vocabulary of ",
                                    vocab, " tokens");
      }
    }
    PromptTokens out;
    out.ids = *request.prompt_tokens;
    return out;
  }
  if (request.messages->empty()) return InvalidArgumentError("the chat has no messages");
  POCKET_ASSIGN_OR_RETURN(ChatTemplate tmpl,
                          ModelChatTemplate(model, *tok, request.wording.no_chat_template));
  return EncodeChat(*tok, tmpl, *request.messages, request.chat, request.parse_special);
}

StatusOr<std::vector<std::vector<int32_t>>> EncodeCandidates(
    const Model& model, const PromptRequest& request, const PromptTokens& prompt,
    std::span<const std::string> candidates) {
  const Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) return FailedPreconditionError("the model has no tokenizer");
  // A chat encoded without parse_special continues its text after the template's last control
  // token (tokens never cross a special one).
  EncodeOptions eo;
  eo.parse_special = request.parse_special;
  eo.add_bos = tok->spec().add_bos;
  if (request.prompt_tokens.has_value()) return TokenizeCandidatesAlone(*tok, candidates, eo);
  POCKET_ASSIGN_OR_RETURN(CandidateTokens c,
                          TokenizeCandidates(*tok, prompt.candidate_context, candidates, eo));
  return std::move(c.candidates);
}

GenerateOptions MakeGenerateOptions(const GenerateRequest& request) {
  GenerateOptions o;
  o.sampling = request.sampling;
  if (request.random_seed) o.sampling.seed = DrawSeed(request.seed_bits);
  o.draft_max = request.draft_max;
  o.draft_min = request.draft_min;
  o.record_spec_steps = request.record_spec_steps;
  if (auto mode = ParseSpec(request); mode.ok()) {
    o.spec_auto = mode->automatic;
    o.spec_guard = mode->guarded();
  }
  o.max_tokens = request.max_tokens;
  o.stop_strings = request.stop;
  return o;
}

StatusOr<SpecMode> ParseSpec(const GenerateRequest& request) {
  SpecMode mode;
  std::string_view spec = request.spec;
  if (spec.empty() || spec == "none") return mode;
  if (spec == "auto") {
    // The model's own block drafter when its package holds one (MakeDrafter), else lookup.
    mode.automatic = true;
    mode.packaged_or_lookup = true;
    spec = "lookup";
  } else if (spec.starts_with("auto:")) {
    mode.automatic = true;
    spec.remove_prefix(5);
  }
  if (spec == "lookup") {
    mode.kind = SpecMode::Kind::kLookup;
  } else if (spec.starts_with("draft:") && spec.size() > 6) {
    mode.kind = SpecMode::Kind::kDraftModel;
    mode.path = std::string(spec.substr(6));
  } else if (spec.starts_with("dflash:") && spec.size() > 7) {
    mode.kind = SpecMode::Kind::kBlock;
    mode.path = std::string(spec.substr(7));
  } else if (spec == "dflash") {
    mode.kind = SpecMode::Kind::kBlock;  // the one in the model's package
  } else {
    return InvalidArgumentError(
        "unknown speculative decoding mode ", QuoteBytes(request.spec),
        " (none, lookup, draft:FILE, dflash, dflash:DIR, auto or auto:MODE)");
  }
  if (request.draft_max < 1) {
    return InvalidArgumentError("--draft-max must be at least 1, got ", request.draft_max);
  }
  if (request.draft_min < 1 || request.draft_min > request.draft_max) {
    return InvalidArgumentError("--draft-min must be between 1 and --draft-max (",
                                request.draft_max, "), got ", request.draft_min);
  }
  if (!(request.draft_p_min >= 0.0f && request.draft_p_min <= 1.0f)) {
    return InvalidArgumentError("--draft-p-min must be in [0, 1], got ", request.draft_p_min);
  }
  POCKET_RETURN_IF_ERROR(request.lookup.Validate());
  return mode;
}

StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const GenerateRequest& request, const Model& target,
                                               const SessionOptions& drafter_session) {
  POCKET_ASSIGN_OR_RETURN(SpecMode mode, ParseSpec(request));
  if (mode.packaged_or_lookup && HasPackagedDrafter(target)) mode.kind = SpecMode::Kind::kBlock;
  switch (mode.kind) {
    case SpecMode::Kind::kNone:
      return std::unique_ptr<Drafter>();
    case SpecMode::Kind::kLookup:
      return std::unique_ptr<Drafter>(std::make_unique<PromptLookupDrafter>(request.lookup));
    case SpecMode::Kind::kDraftModel: {
      auto draft = Model::Load(mode.path);
      if (!draft.ok()) {
        return Status(draft.status().code(),
                      StrCat("draft model ", mode.path, ": ", draft.status().message()));
      }
      DraftModelOptions o;
      o.p_min = request.draft_p_min;
      o.temperature = request.sampling.temperature;
      o.seed = request.sampling.seed;
      o.session = drafter_session;
      auto made = DraftModelDrafter::Create(std::move(*draft), target, o);
      if (!made.ok()) {
        return Status(made.status().code(),
                      StrCat("draft model ", mode.path, ": ", made.status().message()));
      }
      return std::unique_ptr<Drafter>(std::move(*made));
    }
    case SpecMode::Kind::kBlock: {
      // The drafter reads the target's embedding and output matrix: the caller keeps the target
      // alive as long as the drafter (as it does the session), so the pointer does not own it.
      const std::shared_ptr<const Model> target_view(std::shared_ptr<const Model>(), &target);
      DFlashLoadOptions lo;
      lo.weights = DFlashWeights::kInt8;
      // dflash:DIR, or the drafter stored in the model's package (pocket convert --drafter).
      auto model = mode.path.empty() ? DFlashDrafter::LoadFromModel(target_view)
                                     : DFlashDrafter::Load(mode.path, target_view, lo);
      if (!model.ok()) {
        if (mode.path.empty()) return model.status();
        return Status(model.status().code(),
                      StrCat("block drafter ", mode.path, ": ", model.status().message()));
      }
      const int32_t n_ctx = std::min(drafter_session.n_ctx, target.config().n_ctx_train);
      auto made = BlockDrafter::Create(std::move(*model), n_ctx, drafter_session.pool,
                                       drafter_session.kv_type);
      if (!made.ok()) return made.status();
      return std::unique_ptr<Drafter>(std::move(*made));
    }
  }
  return InternalError("unhandled speculative decoding mode");
}

StatusOr<PreparedRequest> PrepareRequest(const Model& model, const GenerateRequest& request,
                                         const SessionOptions& drafter_session) {
  PreparedRequest out;
  POCKET_ASSIGN_OR_RETURN(out.prompt, EncodeRequestPrompt(model, request));
  const Tokenizer& tok = *model.tokenizer();  // EncodeRequestPrompt checked it
  const bool best = request.choice_mode == ChoiceMode::kBest && !request.constraint.choices.empty();
  ConstraintSpec spec = request.constraint;
  if (best) spec.choices.clear();
  auto made = MakeConstraint(tok, spec);
  if (!made.ok()) {
    if (request.constraint_origin.empty()) return made.status();
    return Status(made.status().code(), request.constraint_origin + ": " + made.status().message());
  }
  out.constraint = std::move(*made);
  if (best) {
    if (out.constraint != nullptr) {
      return InvalidArgumentError(
          "give one constraint: choices, a regular expression, a JSON schema or a grammar");
    }
    out.choices = request.constraint.choices;
    POCKET_ASSIGN_OR_RETURN(out.candidates,
                            EncodeCandidates(model, request, out.prompt, out.choices));
  }
  out.options = MakeGenerateOptions(request);
  out.options.constraint = out.constraint.get();
  POCKET_ASSIGN_OR_RETURN(out.drafter, MakeDrafter(request, model, drafter_session));
  out.options.drafter = out.drafter.get();
  POCKET_RETURN_IF_ERROR(out.options.sampling.Validate());
  return out;
}

StatusOr<CandidateChoice> ChooseCandidate(Session& session, const PreparedRequest& request) {
  if (!request.choose_best()) {
    return InvalidArgumentError("the request has no choices to score (ChoiceMode::kBest)");
  }
  const GenerateOptions& options = request.options;
  CandidateChoice c;
  c.result.seed = options.sampling.seed;
  const Stopwatch watch;
  auto scores = session.Score(request.prompt.ids, request.candidates);
  c.result.prefill_us = watch.elapsed_us();
  c.result.n_prompt_tokens = static_cast<int32_t>(request.prompt.ids.size());
  if (scores.status().code() == StatusCode::kCancelled) {
    c.result.stop_reason = StopReason::kCancelled;
    return c;
  }
  POCKET_RETURN_IF_ERROR(scores.status());
  c.scores = std::move(*scores);
  const float t = options.sampling.temperature;
  const CandidateScore* pick = &c.scores.front();
  if (t > 0 && c.scores.size() > 1) {
    // p_i^(1/t) normalized, from log-probabilities (the best one first, so no overflow).
    std::vector<double> weights;
    double total = 0;
    for (const CandidateScore& s : c.scores) {
      weights.push_back(std::exp((s.logprob - c.scores.front().logprob) / t));
      total += weights.back();
    }
    Rng rng(options.sampling.seed);
    double u = rng.NextDouble() * total;
    size_t i = 0;
    while (i + 1 < weights.size() && u >= weights[i]) u -= weights[i++];
    pick = &c.scores[i];
  }
  const std::string& text = request.choices[static_cast<size_t>(pick->index)];
  if (pick->tokens.size() > static_cast<size_t>(options.max_tokens)) {
    // As under a token-by-token constraint: a budget that would cut the output is an error.
    return ResourceExhaustedError("the token budget of ", options.max_tokens,
                                  " is shorter than the chosen candidate ", QuoteBytes(text), " (",
                                  pick->tokens.size(), " tokens)");
  }
  c.chosen = pick->index;
  c.probability = pick->probability;
  c.result.text = text;
  c.result.tokens = pick->tokens;
  c.result.stop_reason = StopReason::kEos;
  return c;
}

}  // namespace pocket
