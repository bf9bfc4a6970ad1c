// Pieces shared by `pocket run` and `pocket chat`: the sampling options, the stats line, the
// model's chat template.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common.h"
#include "runtime/request.h"
#include "runtime/session.h"
#include "tokenizer/chat_template.h"

namespace pocket::cli {

struct GenerationFlags {
  std::string model;
  EngineFlags engine;
  int32_t n_predict = 256;
  float temp = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;
  std::vector<std::string> stop;
  std::string system;
  bool no_think = false;
  std::string spec;  // empty: auto when the model's package holds a drafter, else none
  int32_t draft_max = 8;
  int32_t draft_min = 1;
  float draft_p_min = 0.0f;
  int32_t lookup_min = 1;
  int32_t lookup_max = 3;
  int32_t lookup_branches = 1;

  void Register(CLI::App* app);
  // The request these flags make, without its input (runtime/request.h): -n -1 becomes "until end
  // of text or a full context", a seed of -1 one drawn from the system (32 bits: reported in the
  // stats and --json, so a run can be repeated with --seed), special tokens are parsed in the
  // prompt, and errors are worded with the CLI's options. A usage error (exit 2) is an
  // InvalidArgument status.
  StatusOr<GenerateRequest> Request() const;
  // The options of one generation (MakeGenerateOptions of Request(): a seed is drawn here).
  StatusOr<GenerateOptions> Options() const;
};

// "pocket: prompt ... generated ...; stop: ...; seed: ..." on stderr.
void PrintStats(const GenerateResult& r);
// Writes a piece of generated text to stdout at once.
bool PrintPiece(std::string_view piece);
// The token an empty prompt (-p "") starts from, as llama.cpp and llama2.c start: the tokenizer's
// BOS, else "<|endoftext|>" (Qwen's document separator, llama.cpp's BOS for Qwen); -1 when
// there is neither.
int32_t BeginningOfTextToken(const Tokenizer& tok);
// The model's chat template, or an error saying why there is none.
StatusOr<ChatTemplate> ModelTemplate(const Model& model);

}  // namespace pocket::cli
