#include "format/model_source.h"

#include <sys/stat.h>

#include <cstring>

namespace pocket {

std::string_view SourceKindName(SourceKind kind) {
  switch (kind) {
    case SourceKind::kGguf:
      return "gguf";
    case SourceKind::kHfDirectory:
      return "huggingface";
    case SourceKind::kLlama2c:
      return "llama2.c";
    case SourceKind::kPocket:
      return "pocket";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<ModelSource>> ModelSource::Open(const std::string& path) {
  std::unique_ptr<ModelSource> src(new ModelSource());
  src->path_ = path;
  if (IsDirectory(path)) {
    POCKET_ASSIGN_OR_RETURN(src->hf_, HfDirectory::Open(path));
    src->kind_ = SourceKind::kHfDirectory;
    src->tensors_ = &src->hf_->tensors();
    for (const TensorInfo& t : src->hf_->tensors()) src->file_bytes_ += t.n_bytes;
    src->Index();
    return src;
  }
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> probe, MappedFile::Open(path));
  src->file_bytes_ = probe->size();
  if (probe->size() >= 4 && std::memcmp(probe->data(), "GGUF", 4) == 0) {
    probe.reset();
    POCKET_ASSIGN_OR_RETURN(src->gguf_, GgufFile::Open(path));
    src->kind_ = SourceKind::kGguf;
    src->tensors_ = &src->gguf_->tensors();
  } else if (PocketFile::LooksLikePocket(probe->data(), probe->size())) {
    probe.reset();
    POCKET_ASSIGN_OR_RETURN(src->pocket_, PocketFile::Open(path));
    src->kind_ = SourceKind::kPocket;
    src->tensors_ = &src->pocket_->tensors();
  } else if (Llama2cCheckpoint::LooksLikeLlama2c(probe->data(), probe->size())) {
    probe.reset();
    POCKET_ASSIGN_OR_RETURN(src->llama2c_, Llama2cCheckpoint::Open(path));
    src->kind_ = SourceKind::kLlama2c;
    src->tensors_ = &src->llama2c_->tensors();
  } else {
    return InvalidArgumentError(
        path, ": not a model file pocket knows (first bytes ",
        QuoteBytes(probe->bytes().substr(0, 8)),
        "); expected a .pocket package, a GGUF file, a Hugging Face directory or a llama2.c "
        "checkpoint");
  }
  src->Index();
  return src;
}

void ModelSource::Index() {
  for (size_t i = 0; i < tensors_->size(); ++i) by_name_.emplace((*tensors_)[i].name, i);
}

const TensorInfo* ModelSource::FindTensor(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &(*tensors_)[it->second];
}

}  // namespace pocket
