#include "generation.h"

#include <cstdio>

namespace pocket::cli {

void GenerationFlags::Register(CLI::App* app) {
  app->add_option("-m,--model", model,
                  "the model: .pocket package, GGUF file, Hugging Face directory or llama2.c .bin")
      ->required();
  engine.Register(app);
  engine.RegisterLora(app);
  app->add_option("-n,--n-predict", n_predict,
                  "tokens to generate at most; -1: until end of text or a full context")
      ->capture_default_str();
  app->add_option("--temp", temp, "temperature; 0 is greedy")->capture_default_str();
  app->add_option("--top-k", top_k, "keep the k most likely tokens; 0 is off")
      ->capture_default_str();
  app->add_option("--top-p", top_p,
                  "keep the most likely tokens up to this total probability; 1 is off")
      ->capture_default_str();
  app->add_option("--min-p", min_p,
                  "drop tokens below this fraction of the top probability; 0 is off")
      ->capture_default_str();
  app->add_option("--repeat-penalty", repeat_penalty, "repetition penalty; 1 is off")
      ->capture_default_str();
  app->add_option("--presence-penalty", presence_penalty,
                  "subtracted from the logit of every token already generated; 0 is off")
      ->capture_default_str();
  app->add_option("--frequency-penalty", frequency_penalty,
                  "subtracted per occurrence of a token already generated; 0 is off")
      ->capture_default_str();
  app->add_option("-s,--seed", seed,
                  "random seed; -1 draws one (the seed used is printed in the stats and --json)")
      ->capture_default_str();
  app->add_option("--stop", stop, "stop when this string appears (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--system", system, "system message (run: with --chat)");
  app->add_flag("--no-think", no_think, "Qwen3: disable thinking (enable_thinking=false)");
  app->add_option("--spec", spec,
                  "speculative decoding, lossless (the output is that of plain decoding): none; "
                  "lookup (drafts copied from earlier text); draft:FILE (a draft model with the "
                  "same vocabulary); dflash (the block drafter stored in the model's package) or "
                  "dflash:DIR (a DFlash drafter directory); auto (the package's drafter, else "
                  "lookup, verified only while it pays); auto:MODE (MODE under that policy). "
                  "Default: auto when the model's package holds a drafter, else none");
  app->add_option("--draft-max", draft_max,
                  "--spec: tokens drafted per verification pass at most (30 at most: longer "
                  "passes would take the tile form, another rounding than plain decoding)")
      ->capture_default_str();
  app->add_option("--draft-min", draft_min, "--spec: shorter drafts are not verified")
      ->capture_default_str();
  app->add_option("--draft-p-min", draft_p_min,
                  "--spec draft:FILE: stop drafting when the draft model's top probability is "
                  "below this")
      ->capture_default_str();
  app->add_option("--lookup-min", lookup_min, "--spec lookup: shortest n-gram matched")
      ->capture_default_str();
  app->add_option("--lookup-max", lookup_max, "--spec lookup: longest n-gram matched")
      ->capture_default_str();
  app->add_option("--draft-branches", lookup_branches,
                  "--spec lookup: verify the continuations of up to N earlier matches at once, as "
                  "a draft tree (branches with different next tokens; 1: a single draft)")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
}

namespace {

const char kNoChatTemplate[] =
    "the model has no chat template; use `pocket run` without --chat for plain completion";

}  // namespace

StatusOr<GenerateRequest> GenerationFlags::Request() const {
  if (n_predict < -1) {
    return InvalidArgumentError("-n ", n_predict,
                                ": give a number of tokens, or -1 for until end of text");
  }
  if (seed < -1) return InvalidArgumentError("--seed ", seed, ": give a seed >= 0, or -1");
  GenerateRequest r;
  // -1: as many as the context holds (Generate stops with "context_full").
  r.max_tokens = n_predict < 0 ? kNoTokenLimit : n_predict;
  r.sampling.temperature = temp;
  r.sampling.top_k = top_k;
  r.sampling.top_p = top_p;
  r.sampling.min_p = min_p;
  r.sampling.repetition_penalty = repeat_penalty;
  r.sampling.presence_penalty = presence_penalty;
  r.sampling.frequency_penalty = frequency_penalty;
  if (seed >= 0) {
    r.sampling.seed = static_cast<uint64_t>(seed);
  } else {
    // Drawn from the system: 32 bits (as llama.cpp's), so the printed seed survives every JSON
    // reader (a double holds it exactly) and --seed takes it back.
    r.random_seed = true;
    r.seed_bits = SeedBits::k32;
  }
  r.stop = stop;
  // As Session::Generate(text) and llama.cpp's CLI: special-token strings in the prompt count.
  r.parse_special = true;
  r.chat.enable_thinking = !no_think;
  r.wording.no_tokenizer = StrCat(model, " has no tokenizer; pass one with --tokenizer");
  r.wording.no_chat_template = kNoChatTemplate;
  r.spec = spec;
  r.draft_max = draft_max;
  r.draft_min = draft_min;
  r.draft_p_min = draft_p_min;
  r.lookup.min_ngram = lookup_min;
  r.lookup.max_ngram = lookup_max;
  r.lookup.max_branches = lookup_branches;
  POCKET_RETURN_IF_ERROR(r.sampling.Validate());
  POCKET_RETURN_IF_ERROR(ParseSpec(r).status());  // a usage error before loading
  return r;
}

StatusOr<GenerateOptions> GenerationFlags::Options() const {
  POCKET_ASSIGN_OR_RETURN(GenerateRequest r, Request());
  return MakeGenerateOptions(r);
}

void PrintStats(const GenerateResult& r) {
  const double prefill_s = static_cast<double>(r.prefill_us) * 1e-6;
  const double decode_s = static_cast<double>(r.decode_us) * 1e-6;
  std::fprintf(stderr,
               "\npocket: prompt %d tokens (%d reused) in %.2f s (%.1f tokens/s); generated %zu "
               "tokens in %.2f s (%.1f tokens/s); stop: %s; seed: %llu\n",
               r.n_prompt_tokens, r.n_reused_tokens, prefill_s,
               prefill_s > 0 ? r.n_prompt_tokens / prefill_s : 0.0, r.tokens.size(), decode_s,
               decode_s > 0 ? static_cast<double>(r.tokens.size()) / decode_s : 0.0,
               std::string(StopReasonName(r.stop_reason)).c_str(),
               static_cast<unsigned long long>(r.seed));
  if (r.n_verify_passes > 0 || r.n_plain_steps > 0) {
    std::fprintf(
        stderr,
        "pocket: speculative: %d verification passes and %d plain steps for %zu tokens, "
        "%d of %d drafted tokens accepted (%.2f per pass), drafter %.1f ms\n",
        r.n_verify_passes, r.n_plain_steps, r.tokens.size(), r.n_draft_accepted, r.n_drafted,
        r.n_verify_passes > 0 ? static_cast<double>(r.n_draft_accepted) / r.n_verify_passes : 0.0,
        static_cast<double>(r.draft_us) / 1000.0);
  }
  if (r.n_guarded_steps > 0) {
    std::fprintf(stderr,
                 "pocket: speculative: drafting paused for %d of those steps: the draft model's "
                 "guesses were right less than half the time (auto:draft:FILE weighs its cost "
                 "too and tunes the length)\n",
                 r.n_guarded_steps);
  }
  if (r.n_masks > 0) {
    std::fprintf(stderr,
                 "pocket: constraint: %d masks, %.1f us per token (%.1f ms in all), %d tokens "
                 "forced (no sampling)\n",
                 r.n_masks, static_cast<double>(r.constraint_us) / r.n_masks,
                 static_cast<double>(r.constraint_us) / 1000.0, r.n_forced_tokens);
  }
}

bool PrintPiece(std::string_view piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
  return true;
}

int32_t BeginningOfTextToken(const Tokenizer& tok) {
  if (tok.spec().bos_id >= 0) return tok.spec().bos_id;
  return tok.FindToken("<|endoftext|>");
}

StatusOr<ChatTemplate> ModelTemplate(const Model& model) {
  const Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) return FailedPreconditionError("the model has no tokenizer");
  if (tok->spec().chat_template.empty()) return FailedPreconditionError(kNoChatTemplate);
  return ChatTemplate::Detect(tok->spec().chat_template);
}

}  // namespace pocket::cli
