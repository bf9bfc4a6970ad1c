#include "convert/convert.h"

#include "base/output_file.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/float16.h"
#include "base/mapped_file.h"
#include "base/output_file.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "format/npy_file.h"
#include "format/pocket_file.h"
#include "format/safetensors.h"
#include "model/adapter.h"
#include "model/dflash.h"
#include "model/model.h"
#include "quant/group_quantize.h"
#include "quant/packed.h"
#include "quant/quantize.h"
#include "tokenizer/spec_io.h"

namespace pocket {
namespace {

enum class Encoding { kInt4, kInt8, kF16, kBF16, kF32 };

StatusOr<Encoding> ParseEncoding(const std::string& name, const char* flag) {
  if (name == "int4") return Encoding::kInt4;
  if (name == "int8") return Encoding::kInt8;
  if (name == "f16") return Encoding::kF16;
  if (name == "bf16") return Encoding::kBF16;
  if (name == "f32") return Encoding::kF32;
  return InvalidArgumentError(flag, " ", QuoteBytes(name),
                              " (expected int4, int8, f16, bf16 or f32)");
}

const char* EncodingName(Encoding e) {
  switch (e) {
    case Encoding::kInt4:
      return "int4";
    case Encoding::kInt8:
      return "int8";
    case Encoding::kF16:
      return "f16";
    case Encoding::kBF16:
      return "bf16";
    case Encoding::kF32:
      return "f32";
  }
  return "?";
}

bool IsPacked(Encoding e) {
  return e == Encoding::kInt4 || e == Encoding::kInt8;
}

DType DenseType(Encoding e) {
  return e == Encoding::kF16 ? DType::kF16 : e == Encoding::kBF16 ? DType::kBF16 : DType::kF32;
}

// The smallest group of the packed layout: its groups are multiples of 32 columns.
constexpr int32_t kMinGroup = 32;

// How a matrix of `cols` columns asked for at encoding `e` and `group` columns per scale is stored:
// as asked when the group divides the columns; else at the largest smaller supported group that
// does; else as f16. int8 per row would come before f16, but the runtime has no layout for it:
// packed groups are multiples of 32, and so are the dense Q8_0 blocks, so a width that 32 does not
// divide fits neither. f16 is the nearest dense type the kernels run (and exact for f16 sources).
struct Placement {
  Encoding encoding;
  int32_t group = 0;   // packed encodings only
  std::string reason;  // why not as asked; empty when as asked
};

Placement Place(Encoding e, int32_t group, int64_t cols) {
  if (!IsPacked(e) || cols % group == 0) return {e, group, ""};
  for (int32_t g = group / 2; g >= kMinGroup; g /= 2) {
    if (cols % g == 0) {
      return {e, g, StrCat(cols, " columns are not a multiple of ", group)};
    }
  }
  return {Encoding::kF16, 0,
          StrCat(cols, " columns are not a multiple of ", kMinGroup, ", the smallest group")};
}

std::string PlacementName(Encoding e, int32_t group) {
  return IsPacked(e) ? StrCat(EncodingName(e), " g", group) : std::string(EncodingName(e));
}

// Row r of any matrix as floats.
void ReadRow(const Linear& l, int64_t r, float* out) {
  if (l.packed) {
    DequantizePackedRow(l.p, r, out);
  } else {
    DequantizeRow(l.w.type, l.w.row(r), out, l.w.cols);
  }
}

// A logical matrix made of parts: rows concatenated, or two parts with interleaved panels; or a
// piece of one fused matrix read back from a package: rows [first, first + count) of it (Q, K or V
// of attn_qkv), or (half 0 or 1) the gate or up rows of a matrix whose panels interleave them.
struct Source {
  std::vector<const Linear*> parts;
  bool interleave = false;
  int64_t first = 0;
  int64_t count = -1;
  int32_t half = -1;
  int64_t rows() const {
    if (count >= 0) return count;
    if (half >= 0) return parts[0]->rows() / 2;
    int64_t n = 0;
    for (const Linear* p : parts) n += p->rows();
    return n;
  }
  int64_t cols() const { return parts[0]->cols(); }
  void Row(int64_t r, float* out) const {
    int64_t local = 0;
    const Linear& part = Locate(r, &local);
    ReadRow(part, local, out);
  }
  // The part holding logical row r, and the row's index in it.
  const Linear& Locate(int64_t r, int64_t* local) const {
    if (half >= 0) {
      *local = ((r / kPanelRows) * 2 + half) * kPanelRows + r % kPanelRows;
      return *parts[0];
    }
    if (count >= 0) {
      *local = first + r;
      return *parts[0];
    }
    if (interleave) {
      const int64_t panel = r / kPanelRows, lane = r % kPanelRows;
      *local = (panel / 2) * kPanelRows + lane;
      return *parts[static_cast<size_t>(panel % 2)];
    }
    for (const Linear* p : parts) {
      if (r < p->rows()) {
        *local = r;
        return *p;
      }
      r -= p->rows();
    }
    *local = 0;
    return *parts.back();
  }
};

// --merge-lora: adds the adapters' term s*B*A of a matrix's logical row r to the row read.
using RowAdd = std::function<void(int64_t r, float* row)>;

// When every part of `src` is a GGUF matrix whose blocks map onto the packed layout of encoding
// `e` at `group` columns per scale (Q4_0 / Q4_1 for int4, Q8_0 for int8, every run of group / 32
// blocks sharing its scales), its codes and scales are kept exactly: returns that layout.
bool ExactLayout(const Source& src, bool int4, int32_t group, PackedLayout* out) {
  const DType type = src.parts[0]->packed ? DType::kCount : src.parts[0]->w.type;
  const bool codes_match =
      int4 ? (type == DType::kQ4_0 || type == DType::kQ4_1) : type == DType::kQ8_0;
  if (!codes_match) return false;
  for (const Linear* p : src.parts) {
    if (p->packed || p->w.type != type) return false;
    for (int64_t r = 0; r < p->rows(); ++r) {
      if (!GgufRowFitsGroup(type, p->w.row(r), p->cols(), group)) return false;
    }
  }
  return PackedLayoutForGguf(type, src.rows(), src.cols(), out, group);
}

// The adapters of --merge-lora as floats, per layer and target: each term adds
// scale * sum_k bt[k][row] * a[k][:] to a row of the base (scale = the adapter's own times the
// user's).
struct MergeFactors {
  struct Term {
    std::vector<float> a, bt;  // [rank, in], [rank, out]
    int32_t rank = 0;
    int64_t in = 0, out = 0;
    float scale = 0.0f;
  };
  std::vector<std::array<std::vector<Term>, kLoraTargets>> layers;
  std::array<std::vector<Term>, kLoraAllTargets - kLoraTargets> globals;  // embedding, output

  const std::vector<Term>& Terms(int32_t layer, LoraTarget t) const {
    if (!IsLayerTarget(t)) return globals[static_cast<size_t>(t) - kLoraTargets];
    return layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
  }
  std::vector<Term>& Terms(int32_t layer, LoraTarget t) {
    if (!IsLayerTarget(t)) return globals[static_cast<size_t>(t) - kLoraTargets];
    return layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
  }

  static MergeFactors From(const AdapterSet& set, int32_t n_layers) {
    MergeFactors m;
    m.layers.resize(static_cast<size_t>(n_layers));
    for (const AdapterUse& use : set) {
      for (int32_t l = -1; l < use.adapter->n_layers() && l < n_layers; ++l) {
        // Layer -1: the embedding and the output matrix.
        const int t_begin = l < 0 ? kLoraTargets : 0,
                  t_end = l < 0 ? kLoraAllTargets : kLoraTargets;
        for (int t = t_begin; t < t_end; ++t) {
          const LoraPair& p = use.adapter->pair(std::max(l, 0), static_cast<LoraTarget>(t));
          if (!p.present()) continue;
          Term term;
          term.rank = p.rank;
          term.in = p.a.cols;
          term.out = p.bt.cols;
          term.scale = p.scale * use.scale;
          term.a.resize(static_cast<size_t>(term.rank * term.in));
          term.bt.resize(static_cast<size_t>(term.rank * term.out));
          for (int32_t k = 0; k < term.rank; ++k) {
            DequantizeRow(p.a.type, p.a.row(k), &term.a[static_cast<size_t>(k * term.in)], term.in);
            DequantizeFactorRow(p.bt, k, &term.bt[static_cast<size_t>(k * term.out)]);
          }
          m.Terms(std::max(l, 0), static_cast<LoraTarget>(t)).push_back(std::move(term));
        }
      }
    }
    return m;
  }

  bool Has(int32_t layer, LoraTarget t) const {
    return !layers.empty() && !Terms(layer, t).empty();
  }

  // Adds the terms of (layer, t) to `row` (the base's row `r` of that target), in double.
  void AddRow(int32_t layer, LoraTarget t, int64_t r, float* row) const {
    const std::vector<Term>& terms = Terms(layer, t);
    if (terms.empty()) return;
    const int64_t in = terms[0].in;
    std::vector<double> sum(static_cast<size_t>(in), 0.0);
    for (const Term& term : terms) {
      for (int32_t k = 0; k < term.rank; ++k) {
        const double c =
            static_cast<double>(term.scale) * term.bt[static_cast<size_t>(k * term.out + r)];
        const float* a = &term.a[static_cast<size_t>(k * term.in)];
        for (int64_t i = 0; i < in; ++i) sum[static_cast<size_t>(i)] += c * a[i];
      }
    }
    for (int64_t i = 0; i < in; ++i) {
      row[i] = static_cast<float>(static_cast<double>(row[i]) + sum[static_cast<size_t>(i)]);
    }
  }

  // The embedding's row of token r: + sum over the terms of scale * sum_k a[k][r] * bt[k][:]
  // (B·A is [d_model, vocab]: the embedding holds its transpose), in double.
  void AddEmbedRow(int64_t r, float* row) const {
    const std::vector<Term>& terms = Terms(0, LoraTarget::kEmbed);
    if (terms.empty()) return;
    const int64_t d = terms[0].out;
    std::vector<double> sum(static_cast<size_t>(d), 0.0);
    for (const Term& term : terms) {
      for (int32_t k = 0; k < term.rank; ++k) {
        const double c =
            static_cast<double>(term.scale) * term.a[static_cast<size_t>(k * term.in + r)];
        const float* bt = &term.bt[static_cast<size_t>(k * term.out)];
        for (int64_t i = 0; i < d; ++i) sum[static_cast<size_t>(i)] += c * bt[i];
      }
    }
    for (int64_t i = 0; i < d; ++i) {
      row[i] = static_cast<float>(static_cast<double>(row[i]) + sum[static_cast<size_t>(i)]);
    }
  }

  // The row adder of a matrix made of the targets `parts` (each with its rows), concatenated or
  // (interleave) in alternating panels of kPanelRows rows (gate/up); none when nothing merges.
  std::function<void(int64_t, float*)> Rows(int32_t layer,
                                            std::vector<std::pair<LoraTarget, int64_t>> parts,
                                            bool interleave) const {
    bool any = false;
    for (const auto& part : parts) any = any || Has(layer, part.first);
    if (!any) return {};
    return [this, layer, parts, interleave](int64_t r, float* row) {
      if (interleave) {
        const int64_t panel = r / kPanelRows;
        AddRow(layer, parts[static_cast<size_t>(panel % 2)].first,
               (panel / 2) * kPanelRows + r % kPanelRows, row);
        return;
      }
      for (const auto& [t, n] : parts) {
        if (r < n) {
          AddRow(layer, t, r, row);
          return;
        }
        r -= n;
      }
    };
  }
};

class Converter {
 public:
  Converter(const ConvertOptions& o, ThreadPool& pool) : options_(o), pool_(pool) {}

  Status AddMatrix(PocketWriter& w, const std::string& name, Source src, Encoding requested,
                   const std::string& group_name, RowAdd add = {}) {
    const int64_t rows = src.rows(), cols = src.cols();
    const Placement place = Place(requested, options_.group, cols);
    const Encoding e = place.encoding;
    if (!place.reason.empty()) {
      fallbacks_.push_back({name, group_name, PlacementName(requested, options_.group),
                            PlacementName(e, place.group), place.reason});
    }
    ConvertGroupReport& report = Report(group_name, e);
    report.n_weights += rows * cols;
    if (!IsPacked(e)) {
      const DType type = DenseType(e);
      report.bytes += RowBytes(type, cols) * static_cast<size_t>(rows);
      return w.AddDenseTensor(
          name, type, {rows, cols}, [src, type, add, this](uint8_t* out, size_t) {
            POCKET_RETURN_IF_ERROR(CheckCancelled());
            const int64_t n_rows = src.rows(), n_cols = src.cols();
            const size_t row_bytes = RowBytes(type, n_cols);
            pool_.ParallelFor(n_rows, [&](int64_t b, int64_t end, int) {
              std::vector<float> row(static_cast<size_t>(n_cols));
              for (int64_t r = b; r < end; ++r) {
                src.Row(r, row.data());
                if (add) add(r, row.data());
                QuantizeRow(type, row.data(), out + static_cast<size_t>(r) * row_bytes, n_cols);
              }
            });
            return Status::Ok();
          });
    }
    PackedLayout layout;
    layout.codes = e == Encoding::kInt4 ? PackedCodes::kU4 : PackedCodes::kU8;
    layout.group = place.group;
    layout.rows = rows;
    layout.cols = cols;
    layout.explicit_min = e == Encoding::kInt4;
    if (src.interleave && (src.parts[0]->rows() % kPanelRows != 0)) {
      return InvalidArgumentError("tensor ", name, ": ", src.parts[0]->rows(),
                                  " rows are not a multiple of 16");
    }
    PackedLayout exact;
    if (!add && ExactLayout(src, e == Encoding::kInt4, place.group, &exact)) {
      report.bytes += exact.total_bytes();
      report.kept_weights += rows * cols;
      const DType type = src.parts[0]->w.type;
      return w.AddPackedTensor(name, exact, [src, exact, type, this](uint8_t* out, size_t) {
        POCKET_RETURN_IF_ERROR(CheckCancelled());
        pool_.ParallelFor(exact.n_panels(), [&](int64_t b, int64_t end, int) {
          for (int64_t p = b; p < end; ++p) {
            uint8_t* panel = out + static_cast<size_t>(p) * exact.panel_bytes();
            std::memset(panel, 0, exact.panel_bytes());
            for (int64_t r = 0; r < kPanelRows && p * kPanelRows + r < exact.rows; ++r) {
              int64_t local;
              const Linear& part = src.Locate(p * kPanelRows + r, &local);
              PackGgufRow(type, part.w.row(local), exact, r, panel);
            }
          }
        });
        return Status::Ok();
      });
    }
    report.bytes += layout.total_bytes();
    return w.AddPackedTensor(name, layout, [src, layout, add, this](uint8_t* out, size_t) {
      POCKET_RETURN_IF_ERROR(CheckCancelled());
      pool_.ParallelFor(layout.n_panels(), [&](int64_t b, int64_t end, int) {
        QuantizePanels(src, add, layout, b, end, out);
      });
      return Status::Ok();
    });
  }

  std::vector<ConvertGroupReport> TakeReport() { return std::move(report_); }
  std::vector<ConvertFallback> TakeFallbacks() { return std::move(fallbacks_); }

  Status CheckCancelled() const {
    if (options_.cancelled && options_.cancelled()) return CancelledError("conversion cancelled");
    return Status::Ok();
  }

 private:
  static void QuantizePanels(const Source& src, const RowAdd& add, const PackedLayout& layout,
                             int64_t begin, int64_t end, uint8_t* out) {
    const int64_t cols = layout.cols, n_groups = layout.n_groups();
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<uint8_t> codes(static_cast<size_t>(kPanelRows * cols), 0);
    std::vector<float> d(static_cast<size_t>(kPanelRows * n_groups)), m(d.size());
    PackedLayout panel = layout;
    for (int64_t p = begin; p < end; ++p) {
      panel.rows = std::min<int64_t>(kPanelRows, layout.rows - p * kPanelRows);
      for (int64_t r = 0; r < panel.rows; ++r) {
        src.Row(p * kPanelRows + r, row.data());
        if (add) add(p * kPanelRows + r, row.data());
        for (int64_t g = 0; g < n_groups; ++g) {
          const size_t s = static_cast<size_t>(r * n_groups + g);
          uint8_t* c = &codes[static_cast<size_t>(r * cols + g * layout.group)];
          if (layout.codes == PackedCodes::kU4) {
            QuantizeGroupU4(&row[static_cast<size_t>(g * layout.group)], layout.group, c, &d[s],
                            &m[s]);
          } else {
            QuantizeGroupU8(&row[static_cast<size_t>(g * layout.group)], layout.group, c, &d[s]);
          }
        }
      }
      PackCodes(panel, codes.data(), d.data(), m.data(),
                out + static_cast<size_t>(p) * layout.panel_bytes());
    }
  }

  ConvertGroupReport& Report(const std::string& group, Encoding e) {
    for (ConvertGroupReport& r : report_) {
      if (r.group == group) {
        if (r.encoding.find(EncodingName(e)) == std::string::npos)
          r.encoding += std::string("+") + EncodingName(e);
        return r;
      }
    }
    ConvertGroupReport r;
    r.group = group;
    r.encoding = EncodingName(e);
    report_.push_back(r);
    return report_.back();
  }

  const ConvertOptions& options_;
  ThreadPool& pool_;
  std::vector<ConvertGroupReport> report_;
  std::vector<ConvertFallback> fallbacks_;
};

// The matrix of --classifier-head as f32: a .npy array, or a safetensors tensor (cls_head.weight,
// score.weight, or the file's only tensor).
StatusOr<NpyArray> ReadHeadFile(const std::string& path) {
  const std::string what = StrCat(path, " (--classifier-head)");
  {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
    if (LooksLikeNpy(file->bytes())) {
      auto a = ParseNpy(file->bytes(), what);
      if (!a.ok()) return a.status();
      return std::move(*a);
    }
  }
  auto st = SafetensorsFile::Open(path);
  if (!st.ok()) {
    return InvalidArgumentError(what, ": expected a .npy or safetensors file holding the matrix ",
                                "[n_labels, hidden] (", st.status().message(), ")");
  }
  const std::vector<TensorInfo>& tensors = (*st)->tensors();
  const TensorInfo* t = nullptr;
  for (const char* name : {"cls_head.weight", "score.weight"}) {
    for (const TensorInfo& c : tensors) {
      if (t == nullptr && c.name == name) t = &c;
    }
  }
  if (t == nullptr && tensors.size() == 1) t = &tensors[0];
  if (t == nullptr) {
    std::string names;
    for (const TensorInfo& c : tensors) names += (names.empty() ? "" : ", ") + c.name;
    return InvalidArgumentError(what, ": no tensor cls_head.weight or score.weight, and ",
                                tensors.size(), " tensors to choose from (", names, ")");
  }
  if (!t->type_supported) {
    return UnimplementedError(what, ": tensor ", t->name, " has dtype ", t->type_name,
                              " (F32, F16 or BF16 expected)");
  }
  NpyArray a;
  a.shape = t->shape;
  a.data.resize(static_cast<size_t>(t->n_elements()));
  // Safetensors data may sit at any address: decode from an aligned copy.
  std::vector<uint8_t> bytes(t->data, t->data + t->n_bytes);
  DequantizeRow(t->type, bytes.data(), a.data.data(), t->n_elements());
  return a;
}

// The head to write: the one given by the options, else the input's own (or none).
StatusOr<ClassifierHead> HeadToWrite(const Model& model, const ConvertOptions& o) {
  // Both or neither of the path and the labels (CheckConvertOptions).
  if (o.classifier_head_path.empty()) return model.classifier();
  POCKET_ASSIGN_OR_RETURN(NpyArray a, ReadHeadFile(o.classifier_head_path));
  const int32_t d = model.config().d_model;
  POCKET_RETURN_IF_ERROR(CheckClassifierHead(o.classifier_labels, a.shape, d,
                                             StrCat(o.classifier_head_path, " (--classifier-head)"),
                                             "--classifier-labels"));
  for (float v : a.data) {
    if (!std::isfinite(v)) {
      return InvalidArgumentError(o.classifier_head_path,
                                  " (--classifier-head): the matrix holds a NaN or infinity");
    }
  }
  ClassifierHead head;
  head.labels = o.classifier_labels;
  head.weight = std::move(a.data);
  head.d_model = d;
  return head;
}

// The drafter to store: the one given by the options (loaded and quantized as the runtime loads
// it, so its checks against the model are Load's), else the input package's own (or none).
StatusOr<std::shared_ptr<const DFlashDrafter>> DrafterToWrite(std::shared_ptr<const Model> model,
                                                              const ConvertOptions& o) {
  if (o.drafter_dir.empty()) {
    if (!HasPackagedDrafter(*model)) return std::shared_ptr<const DFlashDrafter>();
    return DFlashDrafter::LoadFromModel(std::move(model));
  }
  DFlashLoadOptions load;
  ParseDFlashWeights(o.drafter_weights, &load.weights);  // checked by CheckConvertOptions
  auto drafter = DFlashDrafter::Load(o.drafter_dir, std::move(model), load);
  if (!drafter.ok()) return drafter.status().WithContext("--drafter");
  return drafter;
}

// Adds the drafter's tensors, bytes as the drafter holds them (packed, or dense as stored; the
// norms f32), and returns its report row.
StatusOr<ConvertGroupReport> AddDrafter(PocketWriter& w, const DFlashDrafter& drafter) {
  ConvertGroupReport report;
  report.group = "drafter";
  auto add_encoding = [&report](const std::string& e) {
    const std::vector<std::string> have = SplitString(report.encoding, '+');
    if (report.encoding.empty()) {
      report.encoding = e;
    } else if (std::find(have.begin(), have.end(), e) == have.end()) {
      report.encoding += "+" + e;
    }
  };
  for (const DFlashDrafter::PackageTensor& t : drafter.PackageTensors()) {
    if (t.vector != nullptr) {
      const float* v = t.vector;
      const int64_t n = t.n;
      report.n_weights += n;
      report.bytes += static_cast<uint64_t>(n) * sizeof(float);
      POCKET_RETURN_IF_ERROR(
          w.AddDenseTensor(t.name, DType::kF32, {n}, [v, n](uint8_t* out, size_t) {
            std::memcpy(out, v, static_cast<size_t>(n) * sizeof(float));
            return Status::Ok();
          }));
      continue;
    }
    const Linear& m = *t.matrix;
    report.n_weights += m.rows() * m.cols();
    report.bytes += m.bytes();
    if (m.packed) {
      const PackedMatrix p = m.p;
      add_encoding(p.layout.codes == PackedCodes::kU4 ? "int4" : "int8");
      POCKET_RETURN_IF_ERROR(w.AddPackedTensor(t.name, p.layout, [p](uint8_t* out, size_t n_bytes) {
        std::memcpy(out, p.data, n_bytes);
        return Status::Ok();
      }));
    } else {
      const WeightMatrix d = m.w;
      add_encoding(std::string(DTypeName(d.type)));
      POCKET_RETURN_IF_ERROR(
          w.AddDenseTensor(t.name, d.type, {d.rows, d.cols}, [d](uint8_t* out, size_t n_bytes) {
            std::memcpy(out, d.data, n_bytes);  // rows are contiguous: row_bytes apart
            return Status::Ok();
          }));
    }
  }
  return report;
}

std::string MetadataJson(const Model& model, const ConvertOptions& o, const std::string& input,
                         const ClassifierHead& head, const DFlashDrafter* drafter,
                         const std::vector<std::pair<std::string, float>>& merged, bool untie) {
  const ModelConfig& c = model.config();
  nlohmann::json j;
  j["format"] = "pocket";
  j["architecture"] = std::string(ArchitectureName(c.arch));
  j["n_layers"] = c.n_layers;
  j["d_model"] = c.d_model;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["d_ff"] = c.d_ff;
  j["vocab_size"] = c.vocab_size;
  j["n_ctx_train"] = c.n_ctx_train;
  j["rope_base"] = c.rope_base;
  j["rope_style"] = c.rope_style == RopeStyle::kNeox ? "neox" : "interleaved";
  j["rms_eps"] = c.rms_eps;
  j["qk_norm"] = c.qk_norm;
  j["qkv_bias"] = c.qkv_bias;
  j["tied_output"] = c.tied_output && !untie;
  // -1 when absent (docs/format.md), also for a model without a tokenizer.
  const Tokenizer* t = model.tokenizer();
  j["bos_token_id"] = t != nullptr ? t->spec().bos_id : -1;
  j["eos_token_id"] = t != nullptr ? t->spec().eos_id : -1;
  j["pad_token_id"] = t != nullptr ? t->spec().pad_id : -1;
  j["generation"] = {
      {"temperature", 0.7},        {"top_k", 20},      {"top_p", 0.8}, {"min_p", 0.0},
      {"repetition_penalty", 1.0}, {"max_tokens", 512}};
  j["inference"] = {{"n_ctx", std::min(c.n_ctx_train, 4096)}, {"kv_type", "f16"}};
  j["quantization"] = {{"weights", o.weights},
                       {"group", o.group},
                       {"embedding", o.embedding.empty() ? o.weights : o.embedding},
                       {"output", o.output.empty() ? o.weights : o.output}};
  j["source"] = {{"path", input}, {"format", std::string(SourceKindName(model.source().kind()))}};
  if (head.present()) j[kPocketClassifierLabelsKey] = head.labels;
  for (const auto& [path, scale] : merged) {
    j["merged_lora"].push_back({{"path", path}, {"scale", scale}});
  }
  if (drafter != nullptr) {
    j[kPocketDrafterKey] = nlohmann::json::parse(drafter->PackageConfigJson());
    if (!o.drafter_dir.empty()) j[kPocketDrafterKey]["source"] = o.drafter_dir;
  }
  return j.dump(2);
}

}  // namespace

Status CheckConvertOptions(const ConvertOptions& options) {
  if (!options.lora.empty() && !options.merge_lora.empty()) {
    return InvalidArgumentError(
        "--lora writes an adapter package and --merge-lora a model package: give one of them");
  }
  if (!options.lora.empty() && !options.drafter_dir.empty()) {
    return InvalidArgumentError(
        "--drafter goes into a model package, not an adapter package "
        "(--lora)");
  }
  POCKET_RETURN_IF_ERROR(ParseEncoding(options.weights, "--weights").status());
  if (!options.embedding.empty()) {
    POCKET_RETURN_IF_ERROR(ParseEncoding(options.embedding, "--embedding").status());
  }
  if (!options.output.empty()) {
    POCKET_RETURN_IF_ERROR(ParseEncoding(options.output, "--output-weights").status());
  }
  if (options.group != 32 && options.group != 64 && options.group != 128) {
    return InvalidArgumentError("--group must be 32, 64 or 128, got ", options.group);
  }
  if (DFlashWeights w; !ParseDFlashWeights(options.drafter_weights, &w)) {
    return InvalidArgumentError("--drafter-weights ", QuoteBytes(options.drafter_weights),
                                " (expected int8, int4 or f32)");
  }
  if (options.n_threads < 0) {
    return InvalidArgumentError("--threads must be 0 (one per hardware thread) or more, got ",
                                options.n_threads);
  }
  if (options.classifier_head_path.empty() && !options.classifier_labels.empty()) {
    return InvalidArgumentError("--classifier-labels needs --classifier-head (the matrix ",
                                "[n_labels, hidden] whose rows score the labels)");
  }
  if (!options.classifier_head_path.empty() && options.classifier_labels.empty()) {
    return InvalidArgumentError("--classifier-head needs --classifier-labels (one name per row)");
  }
  return Status::Ok();
}

StatusOr<ConvertReport> ConvertModel(const std::string& input, const std::string& output,
                                     const ConvertOptions& options) {
  Stopwatch watch;
  POCKET_RETURN_IF_ERROR(CheckConvertOptions(options));
  // Refused before any work (the writer checks again when it creates the file).
  std::vector<std::string> inputs = {input};
  if (!options.tokenizer_path.empty()) inputs.push_back(options.tokenizer_path);
  if (!options.classifier_head_path.empty()) inputs.push_back(options.classifier_head_path);
  if (!options.drafter_dir.empty()) {
    inputs.push_back(options.drafter_dir);
    for (const char* file : {"config.json", "model.safetensors", "model.safetensors.index.json"}) {
      inputs.push_back(options.drafter_dir + "/" + file);
    }
  }
  std::vector<std::pair<std::string, float>> merge;  // (path, scale)
  for (const std::string& arg : options.merge_lora) {
    std::string path;
    float scale = 1.0f;
    POCKET_RETURN_IF_ERROR(ParseAdapterArg(arg, &path, &scale));
    merge.emplace_back(path, scale);
    inputs.push_back(path);
    for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
      inputs.push_back(path + "/" + file);
    }
  }
  POCKET_RETURN_IF_ERROR(CheckNotAnInput(output, inputs));
  POCKET_ASSIGN_OR_RETURN(Encoding body, ParseEncoding(options.weights, "--weights"));
  POCKET_ASSIGN_OR_RETURN(
      Encoding emb, ParseEncoding(options.embedding.empty() ? options.weights : options.embedding,
                                  "--embedding"));
  POCKET_ASSIGN_OR_RETURN(
      Encoding out_enc,
      ParseEncoding(options.output.empty() ? options.weights : options.output, "--output-weights"));
  LoadOptions lo;
  lo.tokenizer_path = options.tokenizer_path;
  lo.repack = false;
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(input, lo));
  const ModelConfig& c = model->config();
  const ModelWeights& w = model->weights();
  if (c.tied_output && !options.embedding.empty() && emb != out_enc) {
    return InvalidArgumentError(
        "the model ties its embedding and output matrices; they are one "
        "matrix, encoded as --output-weights (drop --embedding)");
  }
  const int32_t n_threads =
      options.n_threads > 0
          ? options.n_threads
          : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
  // Checked before anything is written: a bad head leaves no output.
  POCKET_ASSIGN_OR_RETURN(const ClassifierHead head, HeadToWrite(*model, options));
  POCKET_ASSIGN_OR_RETURN(const std::shared_ptr<const DFlashDrafter> drafter,
                          DrafterToWrite(model, options));
  // --merge-lora: every adapter loaded and checked against the model before anything is written.
  AdapterSet merge_set;
  for (const auto& [path, scale] : merge) {
    POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const LoraAdapter> adapter,
                            LoraAdapter::Load(path, *model));
    merge_set.push_back({std::move(adapter), scale});
  }
  const MergeFactors merged = MergeFactors::From(merge_set, c.n_layers);
  // An adapter of the embedding or the output matrix of a tied model: the merged package holds
  // the two matrices apart, each with its own term.
  const bool merge_embed = merged.Has(0, LoraTarget::kEmbed);
  const bool merge_output = merged.Has(0, LoraTarget::kOutput);
  const bool tied = c.tied_output && !merge_embed && !merge_output;
  ThreadPool pool(n_threads);
  Converter conv(options, pool);
  PocketWriter writer;
  writer.SetMetadataJson(
      MetadataJson(*model, options, input, head, drafter.get(), merge, c.tied_output && !tied));
  if (const Tokenizer* tok = model->tokenizer()) {
    POCKET_ASSIGN_OR_RETURN(std::string bytes, SerializeTokenizer(*tok));
    writer.AddSection("tokenizer", std::move(bytes));
    if (!tok->spec().chat_template.empty())
      writer.AddSection("chat_template", tok->spec().chat_template);
  }
  const int64_t d = c.d_model;
  auto vector = [&](const std::string& name, const float* v, int64_t n) {
    return writer.AddDenseTensor(name, DType::kF32, {n}, [v, n](uint8_t* out, size_t) {
      std::memcpy(out, v, static_cast<size_t>(n) * sizeof(float));
      return Status::Ok();
    });
  };
  // The embedding (and, when tied, the output): the output's encoding when tied.
  RowAdd embed_add, output_add;
  if (merge_embed) embed_add = [&merged](int64_t r, float* row) { merged.AddEmbedRow(r, row); };
  if (merge_output) {
    output_add = [&merged](int64_t r, float* row) {
      merged.AddRow(0, LoraTarget::kOutput, r, row);
    };
  }
  POCKET_RETURN_IF_ERROR(conv.AddMatrix(writer, "token_embd.weight", {{&w.token_embd}},
                                        tied ? out_enc : emb, tied ? "output" : "embedding",
                                        embed_add));
  POCKET_RETURN_IF_ERROR(vector("output_norm.weight", w.output_norm, d));
  if (!tied) {
    POCKET_RETURN_IF_ERROR(
        conv.AddMatrix(writer, "output.weight", {{&w.output}}, out_enc, "output", output_add));
  }
  // Fused matrices (Q/K/V, gate/up) must be packed (model/weights.cc): only when the kernels'
  // packed layout holds a row of d_model columns at some group.
  const bool packed = IsPacked(body) && d % kMinGroup == 0;
  for (int32_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    auto name = [i](const char* s) { return StrCat("blk.", i, ".", s); };
    POCKET_RETURN_IF_ERROR(vector(name("attn_norm.weight"), l.attn_norm, d));
    // A package read back holds Q/K/V and gate/up fused: its pieces are read from the fused ones.
    const bool qkv_in = l.qkv.present(), gate_up_in = l.gate_up.present();
    const int64_t qd = c.q_dim(), kvd = c.kv_dim();
    using T = LoraTarget;
    auto add = [&merged, i](std::vector<std::pair<LoraTarget, int64_t>> parts,
                            bool interleave = false) {
      return merged.Rows(i, std::move(parts), interleave);
    };
    if (packed && c.q_dim() % kPanelRows == 0 && c.kv_dim() % kPanelRows == 0) {
      POCKET_RETURN_IF_ERROR(
          conv.AddMatrix(writer, name("attn_qkv.weight"),
                         qkv_in ? Source{{&l.qkv}} : Source{{&l.wq, &l.wk, &l.wv}}, body,
                         "attention", add({{T::kQ, qd}, {T::kK, kvd}, {T::kV, kvd}})));
    } else {
      POCKET_RETURN_IF_ERROR(conv.AddMatrix(
          writer, name("attn_q.weight"), qkv_in ? Source{{&l.qkv}, false, 0, qd} : Source{{&l.wq}},
          body, "attention", add({{T::kQ, qd}})));
      POCKET_RETURN_IF_ERROR(
          conv.AddMatrix(writer, name("attn_k.weight"),
                         qkv_in ? Source{{&l.qkv}, false, qd, kvd} : Source{{&l.wk}}, body,
                         "attention", add({{T::kK, kvd}})));
      POCKET_RETURN_IF_ERROR(
          conv.AddMatrix(writer, name("attn_v.weight"),
                         qkv_in ? Source{{&l.qkv}, false, qd + kvd, kvd} : Source{{&l.wv}}, body,
                         "attention", add({{T::kV, kvd}})));
    }
    if (c.qkv_bias) {
      POCKET_RETURN_IF_ERROR(vector(name("attn_q.bias"), l.bq, c.q_dim()));
      POCKET_RETURN_IF_ERROR(vector(name("attn_k.bias"), l.bk, c.kv_dim()));
      POCKET_RETURN_IF_ERROR(vector(name("attn_v.bias"), l.bv, c.kv_dim()));
    }
    if (c.qk_norm) {
      POCKET_RETURN_IF_ERROR(vector(name("attn_q_norm.weight"), l.q_norm, c.head_dim));
      POCKET_RETURN_IF_ERROR(vector(name("attn_k_norm.weight"), l.k_norm, c.head_dim));
    }
    POCKET_RETURN_IF_ERROR(conv.AddMatrix(writer, name("attn_output.weight"), {{&l.wo}}, body,
                                          "attention", add({{T::kO, d}})));
    POCKET_RETURN_IF_ERROR(vector(name("ffn_norm.weight"), l.ffn_norm, d));
    const int64_t ff = c.d_ff;
    if (packed && c.d_ff % kPanelRows == 0) {
      const Source gu = gate_up_in ? Source{{&l.gate_up}} : Source{{&l.w_gate, &l.w_up}, true};
      POCKET_RETURN_IF_ERROR(conv.AddMatrix(writer, name("ffn_gate_up.weight"), gu, body, "ffn",
                                            add({{T::kGate, ff}, {T::kUp, ff}}, true)));
    } else {
      POCKET_RETURN_IF_ERROR(
          conv.AddMatrix(writer, name("ffn_gate.weight"),
                         gate_up_in ? Source{{&l.gate_up}, false, 0, -1, 0} : Source{{&l.w_gate}},
                         body, "ffn", add({{T::kGate, ff}})));
      POCKET_RETURN_IF_ERROR(
          conv.AddMatrix(writer, name("ffn_up.weight"),
                         gate_up_in ? Source{{&l.gate_up}, false, 0, -1, 1} : Source{{&l.w_up}},
                         body, "ffn", add({{T::kUp, ff}})));
    }
    POCKET_RETURN_IF_ERROR(conv.AddMatrix(writer, name("ffn_down.weight"), {{&l.w_down}}, body,
                                          "ffn", add({{T::kDown, d}})));
  }
  if (head.present()) {
    const int64_t n_labels = head.n_labels();
    POCKET_RETURN_IF_ERROR(writer.AddDenseTensor(kClassifierTensor, DType::kF32, {n_labels, d},
                                                 [&head](uint8_t* out, size_t n_bytes) {
                                                   std::memcpy(out, head.weight.data(), n_bytes);
                                                   return Status::Ok();
                                                 }));
  }
  ConvertGroupReport drafter_report;
  if (drafter) {
    POCKET_ASSIGN_OR_RETURN(drafter_report, AddDrafter(writer, *drafter));
  }
  if (options.progress) {
    writer.set_progress([&options](size_t done, size_t total, const std::string& tensor) {
      options.progress(static_cast<int64_t>(done), static_cast<int64_t>(total), tensor);
    });
  }
  POCKET_RETURN_IF_ERROR(writer.Write(output, inputs));
  ConvertReport report;
  report.groups = conv.TakeReport();
  report.fallbacks = conv.TakeFallbacks();
  int64_t norm_weights = 0;
  for (const TensorInfo& t : model->source().tensors()) {
    if (t.shape.size() == 1 && !t.name.starts_with(kPocketDrafterTensorPrefix)) {
      norm_weights += t.n_elements();
    }
  }
  report.groups.push_back({"norms", norm_weights, static_cast<uint64_t>(norm_weights) * 4, "f32"});
  if (head.present()) {
    const int64_t n = static_cast<int64_t>(head.weight.size());
    report.groups.push_back({"classifier", n, static_cast<uint64_t>(n) * 4, "f32"});
  }
  if (drafter) report.groups.push_back(drafter_report);
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> written, MappedFile::Open(output));
  report.file_bytes = written->size();
  report.seconds = watch.elapsed_s();
  return report;
}

StatusOr<ConvertReport> ConvertAdapter(const std::string& input, const std::string& output,
                                       const ConvertOptions& options) {
  Stopwatch watch;
  POCKET_RETURN_IF_ERROR(CheckConvertOptions(options));
  std::vector<std::string> inputs = {input, options.lora};
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
    inputs.push_back(options.lora + "/" + file);
  }
  POCKET_RETURN_IF_ERROR(CheckNotAnInput(output, inputs));
  LoadOptions lo;
  lo.tokenizer_path = options.tokenizer_path;
  lo.repack = false;
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(input, lo));
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const LoraAdapter> adapter,
                          LoraAdapter::Load(options.lora, *model));
  AdapterPackageOptions o;
  if (!options.classifier_head_path.empty()) {  // only a head given here rides in the adapter
    POCKET_ASSIGN_OR_RETURN(o.head, HeadToWrite(*model, options));
    inputs.push_back(options.classifier_head_path);
  }
  o.factors = options.lora_factors;
  o.source_path = options.lora;
  o.inputs = inputs;
  POCKET_ASSIGN_OR_RETURN(AdapterPackageReport written,
                          WriteAdapterPackage(*adapter, *model, o, output));
  ConvertReport report;
  ConvertGroupReport g;
  g.group = "adapter";
  for (int32_t l = 0; l < adapter->n_layers(); ++l) {
    for (int t = 0; t < kLoraAllTargets; ++t) {
      if (l > 0 && t >= kLoraTargets) continue;  // the embedding's and output's pairs once
      const LoraPair& p = adapter->pair(l, static_cast<LoraTarget>(t));
      if (p.present()) g.n_weights += p.a.rows * p.a.cols + p.bt.rows * p.bt.cols;
    }
  }
  g.bytes = written.file_bytes;
  g.encoding = options.lora_factors;
  report.groups.push_back(g);
  if (written.f16_fallbacks > 0) {
    report.fallbacks.push_back({StrCat(written.f16_fallbacks, " factors"), "adapter",
                                options.lora_factors, "f16",
                                "rows whose width 32 does not divide"});
  }
  report.file_bytes = written.file_bytes;
  report.seconds = watch.elapsed_s();
  return report;
}

}  // namespace pocket
