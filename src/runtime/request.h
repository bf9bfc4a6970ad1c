// One request translation: what a user asks for (a prompt, prompt tokens or chat messages, sampling
// options, a seed or "random", stop strings, a token budget, a constraint) becomes what a Session
// takes (prompt token ids, GenerateOptions with its compiled Constraint). The CLI (`pocket run`,
// `pocket chat`'s options), the C API and the server all go through here, so a request means the
// same tokens and the same sampling whichever front end it came through. The front ends keep only
// the checks of their own surface (flag names, NULL pointers) and say in the request where they
// differ (the default of parse_special, how a random seed is drawn, the wording of errors whose
// remedy is one of their options).
//
// A server's JSON request maps onto GenerateRequest field by field: "prompt" (text or token ids),
// "messages", "max_tokens", "temperature"/"top_p"/... (sampling), "seed" (absent: random_seed),
// "stop", and the constraint fields.
//
// Chat messages are rendered by the model's chat template. Without parse_special, the control-token
// strings (<|im_start|>, <|im_end|>) in the messages' content are text, while the template's own
// are control tokens: the messages are rendered with every control-token string in their content
// replaced by a placeholder (private-use characters, absent from the content), the rendering is
// split at the control tokens that remain (the template's), the text between them is encoded with
// parse_special off after the original strings are put back, and the template's control tokens are
// emitted by id. That is exactly Encode(rendered, parse_special = true) for content without
// control strings, because Encode also splits at special tokens first and encodes the pieces
// separately.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "generate/constraint.h"
#include "generate/drafter.h"
#include "generate/sampler.h"
#include "model/model.h"
#include "runtime/session.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

// A prompt as tokens, and the text a candidate continues.
struct PromptTokens {
  std::vector<int32_t> ids;  // the prompt (BOS first when the tokenizer adds one)
  // The text a candidate continues, for TokenizeCandidates: the whole prompt text, or for a chat
  // encoded without parse_special the rendered text after the template's last control token (a
  // candidate's tokens depend only on the text after the last special token). Empty for a prompt
  // given as token ids.
  std::string candidate_context;
};

// Plain text: Encode(text) with the tokenizer's BOS rule (spec().add_bos).
StatusOr<PromptTokens> EncodePrompt(const Tokenizer& tokenizer, std::string_view text,
                                    bool parse_special);
// A chat rendered with `chat_template` (options.add_generation_prompt as given), encoded as the
// top of this file says.
StatusOr<PromptTokens> EncodeChat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                  const std::vector<ChatMessage>& messages,
                                  const ChatOptions& options, bool parse_special);

// Errors whose remedy is a front end's option (a flag, a C API field): each front end words its
// own. Empty: the runtime's neutral wording ("<model path> has no tokenizer", "<model path> has no
// chat template, so it cannot format messages").
struct RequestWording {
  std::string no_tokenizer;      // the whole message when the model has no tokenizer
  std::string no_chat_template;  // the whole message when messages meet a model without template
};

// What the model reads: exactly one of prompt, prompt_tokens and messages.
struct PromptRequest {
  std::optional<std::string> prompt;                  // plain text
  std::optional<std::vector<int32_t>> prompt_tokens;  // token ids, used as they are
  std::optional<std::vector<ChatMessage>> messages;   // rendered with the model's chat template
  ChatOptions chat;  // for messages: enable_thinking (Qwen3), add_generation_prompt
  // Recognise special-token strings (<|im_end|>) in the caller's text. The C API and the server:
  // off (user text is text); the CLI: on (as Session::Generate(text) and llama.cpp's CLI).
  bool parse_special = false;
  RequestWording wording;
};

// How a random seed is drawn (random_seed).
enum class SeedBits {
  k32,  // 32 bits: exact in every JSON reader (a double), so a printed seed goes back in (CLI)
  k64,  // 64 bits, never UINT64_MAX (the C API's POCKET_SEED_RANDOM sentinel)
};
// A seed from the system (std::random_device).
uint64_t DrawSeed(SeedBits bits);

// How constraint.choices are used.
enum class ChoiceMode {
  kStream,  // a choice constraint: generated token by token (the C API, `run --choice-mode stream`)
  kBest,    // every candidate scored in one forward pass, then ChooseCandidate (`run --choice`)
};

struct GenerateRequest : PromptRequest {
  SamplerParams sampling;    // sampling.seed is used unless random_seed
  bool random_seed = false;  // draw sampling.seed (the seed drawn is in options and the result)
  SeedBits seed_bits = SeedBits::k32;
  // Tokens to generate at most, as GenerateOptions::max_tokens (negative: Generate's error);
  // kNoTokenLimit: until end of text or a full context.
  int32_t max_tokens = GenerateOptions().max_tokens;
  std::vector<std::string> stop;  // stop strings
  ConstraintSpec constraint;      // empty: none
  ChoiceMode choice_mode = ChoiceMode::kStream;
  // Prefixed as "<origin>: " to the constraint's compile errors (the CLI: the file it was read
  // from); empty: nothing.
  std::string constraint_origin;
  // Speculative decoding (lossless: the same tokens as plain decoding, or with a sampled draft
  // model the same distribution): "" or "none"; "lookup" (prompt lookup: n-grams of
  // lookup.min_ngram..max_ngram tokens); "draft:FILE" (a draft model with the target's
  // vocabulary, drafting until its top probability falls below draft_p_min; it samples at the
  // request's temperature); "dflash:DIR" (a block drafter in the released DFlash layout, a Hugging
  // Face directory, drafting a block per pass from the target's hidden states); "dflash" (the
  // block drafter stored in the model's package: pocket convert --drafter); "auto" (the package's
  // block drafter, else prompt lookup, verified only while it pays: spec_auto).
  // "auto:MODE" is MODE under the auto policy. Up to draft_max tokens per verification pass,
  // drafts shorter than draft_min are not verified.
  std::string spec;
  int32_t draft_max = GenerateOptions().draft_max;
  int32_t draft_min = GenerateOptions().draft_min;
  float draft_p_min = 0.0f;
  PromptLookupOptions lookup;
  bool record_spec_steps = false;  // GenerateResult::spec_steps
};

// What a spec string asks for.
struct SpecMode {
  enum class Kind { kNone, kLookup, kDraftModel, kBlock };
  Kind kind = Kind::kNone;
  bool automatic = false;  // the auto policy (GenerateOptions::spec_auto)
  // Plain "auto": the block drafter of the model's package when it holds one, else lookup.
  bool packaged_or_lookup = false;
  std::string path;  // draft:FILE, dflash:DIR
  // GenerateOptions::spec_guard: a draft model at a fixed length (auto: has its own policy).
  bool guarded() const { return kind == Kind::kDraftModel && !automatic; }
};
// Parses and checks `request.spec` and the draft sizes: InvalidArgument naming the bad part.
StatusOr<SpecMode> ParseSpec(const GenerateRequest& request);

// The drafter `request.spec` names (null for plain decoding) for `target`; a draft model is
// loaded and runs on a session with `drafter_session` (its pool, threads, KV type, context).
StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const GenerateRequest& request, const Model& target,
                                               const SessionOptions& drafter_session = {});

inline constexpr int32_t kNoTokenLimit = INT32_MAX;

// A request ready for Session::Generate (or, with ChoiceMode::kBest, for ChooseCandidate).
// Movable; options.constraint points to *constraint, which moves with it.
struct PreparedRequest {
  PromptTokens prompt;
  GenerateOptions options;  // options.constraint == constraint.get(), .drafter == drafter.get()
  std::unique_ptr<Constraint> constraint;
  std::unique_ptr<Drafter> drafter;
  // ChoiceMode::kBest with choices: the candidates' texts and their tokens by the one candidate
  // rule (runtime/candidates.h) after `prompt`; no constraint then.
  std::vector<std::string> choices;
  std::vector<std::vector<int32_t>> candidates;
  bool choose_best() const { return !choices.empty(); }
};

// The prompt's tokens: the model's tokenizer (wording.no_tokenizer when it has none), exactly one
// input, a chat rendered with the model's template (wording.no_chat_template when it has none).
// Prompt tokens must lie in the vocabulary.
StatusOr<PromptTokens> EncodeRequestPrompt(const Model& model, const PromptRequest& request);

// The candidates' tokens after `prompt` (EncodeRequestPrompt of `request`) by the one candidate
// rule (runtime/candidates.h): continuing prompt.candidate_context with the request's
// parse_special, or each candidate alone for prompt tokens. For --choice in best mode and scoring.
StatusOr<std::vector<std::vector<int32_t>>> EncodeCandidates(
    const Model& model, const PromptRequest& request, const PromptTokens& prompt,
    std::span<const std::string> candidates);

// The options without a constraint: sampling (a seed drawn when random_seed), max_tokens, stop
// strings. Not validated (PrepareRequest and Generate do that).
GenerateOptions MakeGenerateOptions(const GenerateRequest& request);

// The whole translation, in this order: the prompt (EncodeRequestPrompt), the constraint
// (MakeConstraint; with kBest the choices' tokens instead), the options (MakeGenerateOptions),
// then the sampling parameters' validation. Errors pass through with their own code and message.
// A draft model named by request.spec runs on a session with `drafter_session`.
StatusOr<PreparedRequest> PrepareRequest(const Model& model, const GenerateRequest& request,
                                         const SessionOptions& drafter_session = {});

// --choice in best mode: the outcome of ChooseCandidate.
struct CandidateChoice {
  GenerateResult result;               // text, tokens, prefill time, seed, stop reason
  std::vector<CandidateScore> scores;  // best first
  int32_t chosen = -1;                 // index into the choices; -1 when cancelled
  double probability = 0.0;            // its probability among the candidates
};

// Scores every candidate of a kBest request in one forward pass (Session::Score): temperature 0
// takes the most probable, a temperature t > 0 samples from the candidates' distribution
// p_i^(1/t), normalized, with the request's seed. A chosen candidate longer than max_tokens is
// ResourceExhausted (as under a token-by-token constraint: a budget never cuts the output).
// Cancelled: stop reason kCancelled and chosen -1.
StatusOr<CandidateChoice> ChooseCandidate(Session& session, const PreparedRequest& request);

}  // namespace pocket
