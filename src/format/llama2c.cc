#include "format/llama2c.h"

#include <cstdio>
#include <cstring>

namespace pocket {

bool Llama2cCheckpoint::LooksLikeLlama2c(const uint8_t* data, size_t size) {
  if (size < 28) return false;
  int32_t h[7];
  std::memcpy(h, data, sizeof(h));
  return h[0] > 0 && h[0] <= 65536 && h[1] > 0 && h[1] <= 1 << 20 && h[2] > 0 && h[2] <= 1024 &&
         h[3] > 0 && h[3] <= 4096 && h[4] > 0 && h[4] <= h[3] && h[5] != 0 && h[6] > 0;
}

StatusOr<std::unique_ptr<Llama2cCheckpoint>> Llama2cCheckpoint::Open(const std::string& path) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  std::unique_ptr<Llama2cCheckpoint> c(new Llama2cCheckpoint());
  POCKET_RETURN_IF_ERROR(c->ParseAll(file->data(), file->size(), path));
  c->file_ = std::move(file);
  return c;
}

StatusOr<std::unique_ptr<Llama2cCheckpoint>> Llama2cCheckpoint::Parse(const uint8_t* data,
                                                                      size_t size,
                                                                      std::string name) {
  std::unique_ptr<Llama2cCheckpoint> c(new Llama2cCheckpoint());
  POCKET_RETURN_IF_ERROR(c->ParseAll(data, size, name));
  return c;
}

Status Llama2cCheckpoint::ParseAll(const uint8_t* data, size_t size, const std::string& name) {
  if (size < 28) {
    return DataLossError(name, ": truncated: ", size, " bytes, the llama2.c header needs 28");
  }
  int32_t h[7];
  std::memcpy(h, data, sizeof(h));
  Llama2cHeader& hd = header_;
  hd.dim = h[0];
  hd.hidden_dim = h[1];
  hd.n_layers = h[2];
  hd.n_heads = h[3];
  hd.n_kv_heads = h[4];
  hd.shared_classifier = h[5] > 0;
  hd.vocab_size = h[5] > 0 ? h[5] : (h[5] == INT32_MIN ? 0 : -h[5]);
  hd.seq_len = h[6];
  if (!LooksLikeLlama2c(data, size) || hd.vocab_size <= 0 || hd.dim % hd.n_heads != 0 ||
      hd.n_heads % hd.n_kv_heads != 0 || (hd.dim / hd.n_heads) % 2 != 0) {
    return DataLossError(name, ": implausible llama2.c header (dim ", h[0], ", hidden_dim ", h[1],
                         ", n_layers ", h[2], ", n_heads ", h[3], ", n_kv_heads ", h[4],
                         ", vocab_size ", h[5], ", seq_len ", h[6], ")");
  }
  const int64_t dim = hd.dim, hidden = hd.hidden_dim, n_layers = hd.n_layers;
  const int64_t head_size = dim / hd.n_heads;
  const int64_t kv_dim = hd.n_kv_heads * head_size;
  const int64_t vocab = hd.vocab_size;
  struct Block {
    const char* name;  // GGUF-style name; "%d" is the layer
    int64_t rows, cols;
    bool per_layer;
  };
  const Block blocks[] = {
      {"token_embd.weight", vocab, dim, false},
      {"blk.%d.attn_norm.weight", 1, dim, true},
      {"blk.%d.attn_q.weight", dim, dim, true},
      {"blk.%d.attn_k.weight", kv_dim, dim, true},
      {"blk.%d.attn_v.weight", kv_dim, dim, true},
      {"blk.%d.attn_output.weight", dim, dim, true},
      {"blk.%d.ffn_norm.weight", 1, dim, true},
      {"blk.%d.ffn_gate.weight", hidden, dim, true},
      {"blk.%d.ffn_down.weight", dim, hidden, true},
      {"blk.%d.ffn_up.weight", hidden, dim, true},
      {"output_norm.weight", 1, dim, false},
      {"(freq_cis_real)", hd.seq_len, head_size / 2, false},
      {"(freq_cis_imag)", hd.seq_len, head_size / 2, false},
      {"output.weight", vocab, dim, false},
  };
  uint64_t offset = 28;
  for (const Block& b : blocks) {
    if (std::strcmp(b.name, "output.weight") == 0 && hd.shared_classifier) continue;
    const int n = b.per_layer ? static_cast<int>(n_layers) : 1;
    const uint64_t bytes_each = static_cast<uint64_t>(b.rows) * static_cast<uint64_t>(b.cols) * 4;
    for (int layer = 0; layer < n; ++layer) {
      if (offset + bytes_each > size) {
        return DataLossError(name, ": truncated: ", b.name, " (layer ", layer,
                             ") needs bytes up to ", offset + bytes_each, ", the file has ", size);
      }
      if (b.name[0] != '(') {
        TensorInfo t;
        char buf[64];
        std::snprintf(buf, sizeof(buf), b.name, layer);
        t.name = buf;
        t.type = DType::kF32;
        t.type_name = "f32";
        t.shape = b.rows == 1 ? std::vector<int64_t>{b.cols} : std::vector<int64_t>{b.rows, b.cols};
        t.data = data + offset;
        t.n_bytes = static_cast<size_t>(bytes_each);
        tensors_.push_back(std::move(t));
      }
      offset += bytes_each;
    }
  }
  if (offset != size) {
    return DataLossError(name, ": ", size - offset, " bytes after the last tensor; not a llama2.c ",
                         "legacy checkpoint with this header (expected ", offset, " bytes)");
  }
  return Status::Ok();
}

}  // namespace pocket
