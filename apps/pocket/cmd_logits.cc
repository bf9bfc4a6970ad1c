// pocket logits: float32 logits of a token sequence as .npy, [n_positions, vocab] (only the last
// position unless --all). --decode-from K evaluates the first K tokens as one prefill and the rest
// one token at a time through the KV cache, which is how tests check the decode path.
#include <map>
#include <memory>
#include <vector>

#include "base/output_file.h"
#include "common.h"
#include "npy.h"
#include "runtime/session.h"

namespace pocket::cli {

Command AddLogitsCommand(CLI::App& root) {
  auto* app = root.add_subcommand("logits", "write the logits of a token sequence as .npy");
  struct Flags {
    std::string model, ids, out;
    EngineFlags engine;
    bool all = false;
    int32_t decode_from = -1;
    std::string trace_dir;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->model, "model file or directory")->required();
  f->engine.Register(app);
  f->engine.RegisterLora(app);
  app->add_option("--ids", f->ids, "comma-separated token ids, e.g. 1,2,3")->required();
  app->add_flag("--all", f->all, "logits of every position, not only the last");
  app->add_option("--decode-from", f->decode_from,
                  "prefill the first K tokens, then decode the rest one at a time");
#if POCKET_FORWARD_TRACE
  app->add_option("--trace-dir", f->trace_dir,
                  "debug builds: also write every intermediate of the forward pass (embed, "
                  "blk.N.out, logits) as DIR/NAME.npy, rows of all chunks in order");
#endif
  app->add_option("-o,--output", f->out,
                  "the .npy file to write, float32 [positions, vocab] (never one of the inputs)")
      ->required();
  SetExamples(app,
              {"pocket logits -m model.gguf --ids 1,2,3 -o last.npy",
               "pocket logits -m model.gguf --ids 1,2,3,4 --all --decode-from 2 -o all.npy",
               "pocket logits -m stories260K.bin --tokenizer tok512.bin --ids 1,403 -o x.npy"});
  return {
      app, [=]() -> int {
        if (f->ids.empty()) return ReportUsageError("--ids is empty; give token ids, e.g. 1,2,3");
        if (f->out.empty()) return ReportUsageError("-o is empty; give the .npy file to write");
        std::vector<int32_t> ids;
        for (const std::string& part : SplitString(f->ids, ',')) {
          char* end = nullptr;
          const long v = std::strtol(part.c_str(), &end, 10);
          if (part.empty() || *end != '\0' || v < 0 || v > INT32_MAX) {
            return ReportUsageError(StrCat("--ids: ", QuoteBytes(part), " is not a token id"));
          }
          ids.push_back(static_cast<int32_t>(v));
        }
        // Every file the command reads; refused as the output before the model loads.
        std::vector<std::string> inputs = {f->model};
        if (!f->engine.tokenizer.empty()) inputs.push_back(f->engine.tokenizer);
        if (Status s = CheckNotAnInput(f->out, inputs); !s.ok()) return ReportError(s);
        auto model = LoadModel(f->model, f->engine);
        if (!model.ok()) return ReportError(model.status());
        const int32_t vocab = (*model)->config().vocab_size;
        for (size_t i = 0; i < ids.size(); ++i) {
          if (ids[i] >= vocab) {
            return ReportError(OutOfRangeError("--ids: id ", ids[i], " at position ", i,
                                               " is outside the vocabulary of ", vocab));
          }
        }
        auto engine = f->engine.Session();
        if (!engine.ok()) return ReportUsageError(engine.status().message());
        SessionOptions so = *engine;
        so.n_ctx = static_cast<int32_t>(ids.size());
        if (static_cast<int32_t>(ids.size()) > (*model)->config().n_ctx_train) {
          return ReportError(OutOfRangeError(ids.size(), " ids exceed the model's context of ",
                                             (*model)->config().n_ctx_train));
        }
        auto session = Session::Create(*model, so);
        if (!session.ok()) return ReportError(session.status());
        if (Status s = ApplyAdapters(**session, **model, f->engine); !s.ok()) return ReportError(s);
#if POCKET_FORWARD_TRACE
        // name -> (columns, rows so far): chunks append their rows.
        auto traced =
            std::make_shared<std::map<std::string, std::pair<int64_t, std::vector<float>>>>();
        if (!f->trace_dir.empty()) {
          (*session)->set_trace([traced](std::string_view name, const float* x, int64_t n_rows,
                                         int64_t cols, int64_t ld) {
            auto& [width, rows] = (*traced)[std::string(name)];
            width = cols;
            for (int64_t r = 0; r < n_rows; ++r)
              rows.insert(rows.end(), x + r * ld, x + r * ld + cols);
          });
        }
#endif
        const size_t n = ids.size();
        std::vector<float> logits(n * static_cast<size_t>(vocab));
        const size_t k = f->decode_from < 0 ? n : std::min(n, static_cast<size_t>(f->decode_from));
        std::span<const int32_t> all(ids);
        if (k > 0) {
          Status s = (*session)->Append(all.subspan(0, k), logits.data());
          if (!s.ok()) return ReportError(s);
        }
        for (size_t i = k; i < n; ++i) {
          Status s = (*session)->Append(all.subspan(i, 1));
          if (!s.ok()) return ReportError(s);
          std::span<const float> last = (*session)->last_logits();
          std::copy(last.begin(), last.end(), logits.begin() + static_cast<ptrdiff_t>(i * vocab));
        }
        Status w;
        if (f->all) {
          w = WriteNpyFloat32(f->out, {static_cast<int64_t>(n), vocab}, logits.data(), inputs);
        } else {
          w = WriteNpyFloat32(f->out, {1, vocab}, logits.data() + (n - 1) * vocab, inputs);
        }
        if (!w.ok()) return ReportError(w);
#if POCKET_FORWARD_TRACE
        for (const auto& [name, value] : *traced) {
          const auto& [cols, rows] = value;
          const int64_t n_rows = static_cast<int64_t>(rows.size()) / cols;
          if (Status t = WriteNpyFloat32(f->trace_dir + "/" + name + ".npy", {n_rows, cols},
                                         rows.data(), inputs);
              !t.ok()) {
            return ReportError(t);
          }
        }
#endif
        return 0;
      }};
}

}  // namespace pocket::cli
