// The classification head a model file may carry: a matrix [n_labels, d_model] (tensor
// cls_head.weight) and the names of its labels (.pocket meta `classifier_labels`, GGUF metadata
// `pocket.classifier.labels`). Session::Classify multiplies it with the final-norm hidden state
// of a prompt's last token: one label logit per row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/model_source.h"
#include "model/config.h"

namespace pocket {

inline constexpr char kClassifierTensor[] = "cls_head.weight";
inline constexpr char kPocketClassifierLabelsKey[] = "classifier_labels";
inline constexpr char kGgufClassifierLabelsKey[] = "pocket.classifier.labels";

struct ClassifierHead {
  std::vector<std::string> labels;  // row i of weight scores labels[i]
  std::vector<float> weight;        // [n_labels, d_model], row-major, f32 (converted once)
  int32_t d_model = 0;

  bool present() const { return !labels.empty(); }
  int32_t n_labels() const { return static_cast<int32_t>(labels.size()); }
};

// Checks a head before it is written or used: labels non-empty, distinct and as many as the
// matrix has rows; the matrix 2-D with d_model columns. `tensor` and `labels_field` name where
// each came from in messages (a tensor or file; a metadata key or flag).
Status CheckClassifierHead(const std::vector<std::string>& labels,
                           const std::vector<int64_t>& shape, int64_t d_model,
                           const std::string& tensor, const std::string& labels_field);

// The head a model file carries, or an empty head (present() false) when it has none. A tensor
// without labels, labels without a tensor, or a shape that does not fit the model is an error
// naming the file, the tensor and the metadata key.
StatusOr<ClassifierHead> LoadClassifierHead(const ModelSource& source, const ModelConfig& config);

}  // namespace pocket
