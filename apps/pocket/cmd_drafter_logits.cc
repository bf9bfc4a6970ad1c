// pocket drafter-logits (a debug command, hidden from --help): the logits of a DFlash block
// drafter's blocks as .npy, [blocks * block_size, vocab], for tests against the numpy reference.
// The target runs once over the ids (Forward with hidden_layers: its KV cache and the hidden
// states of the drafter's target layers); then, for each N of --block-at in order, the drafter's
// context is cut back or extended to the first N ids (AppendContext) and the block [ids[N], mask
// x (B - 1)] is drafted at position N. A list that goes back (--block-at 20,7,31) checks rollback.
#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "base/output_file.h"
#include "base/timer.h"
#include "common.h"
#include "model/dflash.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/scratch.h"
#include "npy.h"

namespace pocket::cli {
namespace {

StatusOr<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text) {
  std::vector<int32_t> out;
  for (const std::string& part : SplitString(text, ',')) {
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0 || v > INT32_MAX) {
      return InvalidArgumentError(flag, ": ", QuoteBytes(part), " is not a non-negative integer");
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

}  // namespace

Command AddDrafterLogitsCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "drafter-logits", "debug: write a DFlash block drafter's logits for blocks of ids as .npy");
  app->group("");  // hidden: a test tool
  struct Flags {
    std::string model, drafter, ids, block_at, out, weights = "f32";
    EngineFlags engine;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->model, "the target model")->required();
  app->add_option("--drafter", f->drafter,
                  "the drafter's directory (config.json + safetensors), or \"package\": the one "
                  "the model's .pocket package stores (its weights as stored)")
      ->required();
  f->engine.Register(app);
  app->add_option("--ids", f->ids, "comma-separated token ids")->required();
  app->add_option("--block-at", f->block_at,
                  "comma-separated N: a block after the first N ids, with ids[N] as its first "
                  "token (default: the last id)");
  app->add_option("--drafter-weights", f->weights, "f32 | int8 | int4")->capture_default_str();
  app->add_option("-o,--output", f->out, "the .npy file to write [blocks * B, vocab]")->required();
  SetExamples(app, {"pocket drafter-logits -m tiny.gguf --drafter drafter/ --ids 1,2,3,4 "
                    "--block-at 3,1 --no-repack --kv-type f32 -o out.npy"});
  return {
      app, [=]() -> int {
        auto ids = ParseIdList("--ids", f->ids);
        if (!ids.ok()) return ReportUsageError(ids.status().message());
        if (ids->empty()) return ReportUsageError("--ids is empty");
        std::vector<int32_t> blocks = {static_cast<int32_t>(ids->size()) - 1};
        if (!f->block_at.empty()) {
          auto parsed = ParseIdList("--block-at", f->block_at);
          if (!parsed.ok()) return ReportUsageError(parsed.status().message());
          blocks = *parsed;
        }
        for (int32_t b : blocks) {
          if (b >= static_cast<int32_t>(ids->size())) {
            return ReportUsageError(StrCat("--block-at ", b, ": the block's first token is ids[", b,
                                           "], but there are ", ids->size(), " ids"));
          }
        }
        DFlashLoadOptions load;
        if (!ParseDFlashWeights(f->weights, &load.weights)) {
          return ReportUsageError(StrCat("--drafter-weights ", QuoteBytes(f->weights),
                                         " (expected f32, int8 or "
                                         "int4)"));
        }
        auto engine = f->engine.Session();
        if (!engine.ok()) return ReportUsageError(engine.status().message());
        const bool packaged = f->drafter == "package";
        std::vector<std::string> inputs = {f->model};
        if (!packaged) {
          inputs.push_back(f->drafter + "/config.json");
          inputs.push_back(f->drafter + "/model.safetensors");
        }
        if (Status s = CheckNotAnInput(f->out, inputs); !s.ok()) return ReportError(s);
        auto model = LoadModel(f->model, f->engine);
        if (!model.ok()) return ReportError(model.status());
        auto drafter = packaged ? DFlashDrafter::LoadFromModel(*model)
                                : DFlashDrafter::Load(f->drafter, *model, load);
        if (!drafter.ok()) return ReportError(drafter.status());
        const ModelConfig& c = (*model)->config();
        for (size_t i = 0; i < ids->size(); ++i) {
          if ((*ids)[i] >= c.vocab_size) {
            return ReportError(OutOfRangeError("--ids: id ", (*ids)[i], " at position ", i,
                                               " is outside the vocabulary of ", c.vocab_size));
          }
        }
        const int32_t n_threads =
            engine->n_threads > 0
                ? engine->n_threads
                : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
        ThreadPool pool(n_threads);
        // The target over the context every block needs: its hidden states of the drafter's
        // layers, [layers, rows, d_model].
        const int32_t n = *std::max_element(blocks.begin(), blocks.end());
        const std::span<const int32_t> layer_ids = (*drafter)->target_layer_ids();
        const int64_t d = c.d_model;
        std::vector<float> hidden(layer_ids.size() * static_cast<size_t>(std::max(n, 1) * d));
        if (n > 0) {
          auto scratch = ForwardScratch::Create(**model, n, n_threads);
          if (!scratch.ok()) return ReportError(scratch.status());
          auto kv = KvCache::Create(c, n, engine->kv_type);
          if (!kv.ok()) return ReportError(kv.status());
          const BatchSegment seg{.kv = &*kv, .row_begin = 0, .row_end = n};
          ForwardBatch batch;
          batch.tokens = std::span<const int32_t>(*ids).subspan(0, static_cast<size_t>(n));
          batch.segments = std::span<const BatchSegment>(&seg, 1);
          batch.output_rows = scratch->rows(0, n);
          batch.hidden_layers = layer_ids;
          batch.layer_hidden = hidden.data();
          if (Status s = Forward(**model, *scratch, pool, batch); !s.ok()) return ReportError(s);
        }
        auto state = DFlashState::Create(*drafter, std::max(n, 1), &pool, engine->kv_type);
        if (!state.ok()) return ReportError(state.status());
        const int32_t B = (*drafter)->block_size();
        std::vector<float> logits(blocks.size() * static_cast<size_t>(B) * c.vocab_size);
        std::vector<int32_t> draft;
        for (size_t i = 0; i < blocks.size(); ++i) {
          const int32_t at = blocks[i], have = state->context_length();
          Stopwatch append_time;
          Status s = at <= have ? state->AppendContext(at, 0, nullptr, 0)
                                : state->AppendContext(have, at - have, hidden.data() + have * d,
                                                       int64_t{n} * d);
          const int64_t append_us = append_time.elapsed_us();
          Stopwatch block_time;
          if (s.ok()) {
            s = state->DraftBlock((*ids)[static_cast<size_t>(at)], B - 1, &draft,
                                  logits.data() + i * static_cast<size_t>(B) * c.vocab_size);
          }
          if (!s.ok()) return ReportError(s);
          std::string text;
          for (int32_t t : draft) text += StrCat(text.empty() ? "" : ",", t);
          std::printf("block at %d: draft %s (context %.3f ms, block %.3f ms)\n", at, text.c_str(),
                      static_cast<double>(append_us) * 1e-3,
                      static_cast<double>(block_time.elapsed_us()) * 1e-3);
        }
        if (Status w =
                WriteNpyFloat32(f->out, {static_cast<int64_t>(blocks.size()) * B, c.vocab_size},
                                logits.data(), inputs);
            !w.ok()) {
          return ReportError(w);
        }
        return 0;
      }};
}

}  // namespace pocket::cli
