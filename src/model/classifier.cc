#include "model/classifier.h"

#include <set>

#include "format/gguf.h"
#include "format/pocket_file.h"
#include "quant/quantize.h"

namespace pocket {

Status CheckClassifierHead(const std::vector<std::string>& labels,
                           const std::vector<int64_t>& shape, int64_t d_model,
                           const std::string& tensor, const std::string& labels_field) {
  if (labels.empty()) return InvalidArgumentError(labels_field, " names no labels");
  std::set<std::string> seen;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].empty()) return InvalidArgumentError(labels_field, ": label ", i, " is empty");
    if (!seen.insert(labels[i]).second) {
      return InvalidArgumentError(labels_field, ": label ", QuoteBytes(labels[i]),
                                  " appears twice");
    }
  }
  if (shape.size() != 2 || shape[1] != d_model) {
    return InvalidArgumentError(tensor, ": expected [n_labels, ", d_model,
                                "] (hidden size of the model), got ", ShapeString(shape));
  }
  if (shape[0] != static_cast<int64_t>(labels.size())) {
    return InvalidArgumentError(tensor, " has ", shape[0], " rows but ", labels_field, " names ",
                                labels.size(), " labels; they must match (one row per label)");
  }
  return Status::Ok();
}

StatusOr<ClassifierHead> LoadClassifierHead(const ModelSource& source, const ModelConfig& config) {
  ClassifierHead head;
  // The labels: a string array in the metadata of the formats that can carry one.
  std::string field;
  bool has_labels = false;
  std::vector<std::string> labels;
  if (source.kind() == SourceKind::kPocket) {
    field = StrCat(source.path(), " (meta): ", kPocketClassifierLabelsKey);
    if (const ConfigValue* v = source.pocket()->Find(kPocketClassifierLabelsKey)) {
      has_labels = true;
      if (v->kind != ConfigValue::Kind::kArray || v->strings.size() != v->array_size) {
        return InvalidArgumentError(field, " is ", v->json, ", expected an array of strings");
      }
      labels = v->strings;
    }
  } else if (source.kind() == SourceKind::kGguf) {
    field = StrCat(source.path(), ": ", kGgufClassifierLabelsKey);
    if (const GgufValue* v = source.gguf()->Find(kGgufClassifierLabelsKey)) {
      has_labels = true;
      if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
        return InvalidArgumentError(field, " must be an array of strings");
      }
      for (std::string_view s : v->strings) labels.emplace_back(s);
    }
  } else {
    return head;  // Hugging Face directories and llama2.c checkpoints carry no head
  }
  const TensorInfo* t = source.FindTensor(kClassifierTensor);
  const std::string tensor = StrCat(source.path(), ": tensor ", kClassifierTensor);
  if (t == nullptr && !has_labels) return head;
  if (t == nullptr) {
    return InvalidArgumentError(field, " is set but the file has no tensor ", kClassifierTensor,
                                " (the classification head)");
  }
  if (!has_labels) {
    return InvalidArgumentError(
        tensor, " is present but ",
        source.kind() == SourceKind::kGguf ? kGgufClassifierLabelsKey : kPocketClassifierLabelsKey,
        " (the names of its labels) is missing");
  }
  POCKET_RETURN_IF_ERROR(CheckClassifierHead(labels, t->shape, config.d_model, tensor, field));
  if (t->packed || !t->type_supported || !IsBlockAligned(t->type, config.d_model)) {
    return InvalidArgumentError(tensor, " is ", t->type_name,
                                "; a classification head must be a dense matrix (f32, f16, bf16)");
  }
  head.labels = std::move(labels);
  head.d_model = config.d_model;
  head.weight.resize(head.labels.size() * static_cast<size_t>(config.d_model));
  const size_t row_bytes = RowBytes(t->type, config.d_model);
  for (size_t r = 0; r < head.labels.size(); ++r) {
    DequantizeRow(t->type, t->data + r * row_bytes,
                  head.weight.data() + r * static_cast<size_t>(config.d_model), config.d_model);
  }
  return head;
}

}  // namespace pocket
