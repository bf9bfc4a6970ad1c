#include "model/model.h"

#include <cmath>

#include "base/mapped_file.h"
#include "base/timer.h"
#include "kernels/select.h"
#include "tokenizer/spec_io.h"

namespace pocket {
namespace {

StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizerFile(const std::string& path,
                                                             int32_t vocab_size) {
  if (EndsWith(path, ".json")) return Tokenizer::FromHfJsonFile(path);
  return Tokenizer::FromLlama2cFile(path, vocab_size);
}

}  // namespace

StatusOr<std::shared_ptr<const Model>> Model::Load(const std::string& path,
                                                   const LoadOptions& options) {
  Stopwatch watch;
  std::shared_ptr<Model> m(new Model());
  POCKET_ASSIGN_OR_RETURN(m->source_, ModelSource::Open(path));
  const ModelSource& src = *m->source_;
  switch (src.kind()) {
    case SourceKind::kGguf: {
      POCKET_ASSIGN_OR_RETURN(m->config_, ConfigFromGguf(*src.gguf()));
      break;
    }
    case SourceKind::kHfDirectory: {
      POCKET_ASSIGN_OR_RETURN(m->config_, ConfigFromHf(*src.hf()));
      break;
    }
    case SourceKind::kPocket: {
      POCKET_ASSIGN_OR_RETURN(m->config_, ConfigFromPocket(*src.pocket()));
      break;
    }
    case SourceKind::kLlama2c: {
      auto config = ConfigFromLlama2c(src.llama2c()->header());
      if (!config.ok()) return config.status().WithContext(path);
      m->config_ = *config;
      break;
    }
  }
  BindOptions bind;
  bind.repack = options.repack;
  bind.huge_pages = options.huge_pages;
  POCKET_ASSIGN_OR_RETURN(m->weights_, BindWeights(src, m->config_, bind));
  POCKET_ASSIGN_OR_RETURN(m->classifier_, LoadClassifierHead(src, m->config_));
  if (options.kernels != nullptr) {
    m->kernels_ = options.kernels;
  } else {
    // The default table, or POCKET_KERNELS's (a name this CPU cannot run is an error here).
    POCKET_ASSIGN_OR_RETURN(m->kernels_, SelectKernels(KernelOptions()));
  }

  if (!options.tokenizer_path.empty()) {
    POCKET_ASSIGN_OR_RETURN(m->tokenizer_,
                            LoadTokenizerFile(options.tokenizer_path, m->config_.vocab_size));
  } else if (src.kind() == SourceKind::kGguf && src.gguf()->Find("tokenizer.ggml.model")) {
    POCKET_ASSIGN_OR_RETURN(m->tokenizer_, TokenizerFromGguf(*src.gguf()));
  } else if (src.kind() == SourceKind::kPocket && !src.pocket()->Section("tokenizer").empty()) {
    // Its tables are used in place from the mapping, which the tokenizer keeps alive.
    POCKET_ASSIGN_OR_RETURN(
        m->tokenizer_,
        LoadTokenizerSection(src.pocket()->Section("tokenizer"), path,
                             std::string(src.pocket()->Section("chat_template")), m->source_));
  } else if (src.kind() == SourceKind::kHfDirectory && !src.hf()->tokenizer_json_path().empty()) {
    POCKET_ASSIGN_OR_RETURN(m->tokenizer_,
                            Tokenizer::FromHfJsonFile(src.hf()->tokenizer_json_path()));
  }
  if (m->tokenizer_ && m->tokenizer_->vocab_size() > m->config_.vocab_size) {
    return InvalidArgumentError(path, ": the tokenizer has ", m->tokenizer_->vocab_size(),
                                " tokens but the model's vocabulary is ", m->config_.vocab_size);
  }
  if (m->tokenizer_) {
    const TokenizerSpec& spec = m->tokenizer_->spec();
    if (spec.eos_id >= 0) m->stop_token_ids_.push_back(spec.eos_id);
    // llama2.c models separate stories with BOS; run.c stops when the model emits it.
    if (spec.kind == TokenizerKind::kLlama2c && spec.bos_id >= 0) {
      m->stop_token_ids_.push_back(spec.bos_id);
    }
    // Chat models end a turn with <|im_end|>; base models with <|endoftext|>. Stop on both.
    for (const char* end : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>"}) {
      const int32_t id = m->tokenizer_->FindToken(end);
      if (id >= 0 && id != spec.eos_id) m->stop_token_ids_.push_back(id);
    }
  }

  if (src.kind() == SourceKind::kPocket) {
    // The small sections have been parsed (or, for the tokenizer's tables, checked): let their
    // mapped pages go, so that only what is used later (the tables that encoding probes) comes
    // back into the resident set.
    for (const char* section : {"meta", "tokenizer", "chat_template", "tensors"}) {
      const std::string_view bytes = src.pocket()->Section(section);
      if (!bytes.empty()) ReleaseMappedPages(bytes.data(), bytes.size());
    }
  }
  const int32_t half = m->config_.head_dim / 2;
  m->rope_inv_freq_.resize(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    m->rope_inv_freq_[static_cast<size_t>(i)] =
        std::pow(static_cast<double>(m->config_.rope_base),
                 -2.0 * static_cast<double>(i) / static_cast<double>(m->config_.head_dim));
  }
  m->load_us_ = watch.elapsed_us();
  options.logger.Info("loaded ", path, " (", SourceKindName(src.kind()), ", ",
                      m->config_.ToString(), ") in ", m->load_us_ / 1000, " ms");
  if (m->classifier_.present()) {
    options.logger.Info("classification head: ", m->classifier_.n_labels(), " labels");
  }
  return std::shared_ptr<const Model>(std::move(m));
}

}  // namespace pocket
