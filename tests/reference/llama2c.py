"""llama2.c legacy (version 0) checkpoints and tok512.bin-style tokenizers (independent reference).

Format as documented in testdata/stories260K/README.md:
  header: 7 x int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
          (negative vocab_size: the classifier wcls is stored separately at the end)
  float32 weights: token_embedding_table, rms_att_weight, wq, wk, wv, wo, rms_ffn_weight,
          w1 (gate), w2 (down), w3 (up), rms_final_weight, freq_cis_real, freq_cis_imag, [wcls]
Tokenizer: int32 max_token_length, then per token float32 score, int32 len, len bytes.
"""

import re
import struct

import numpy as np

HEADER = struct.Struct("<7i")
BOS_ID, EOS_ID = 1, 2


def is_llama2c_checkpoint(path):
    """Heuristic: the header is plausible and the file size matches exactly."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
        if len(head) != HEADER.size or head[:4] == b"GGUF":
            return False
        return _expected_size(HEADER.unpack(head)) == _file_size(path)
    except (OSError, ValueError, ZeroDivisionError):
        return False


def _file_size(path):
    with open(path, "rb") as f:
        f.seek(0, 2)
        return f.tell()


def _shapes(header):
    dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len = header
    if min(dim, hidden_dim, n_layers, n_heads, n_kv_heads, seq_len) <= 0 or dim % n_heads:
        raise ValueError(f"implausible llama2.c header {header}")
    vocab = abs(vocab_size)
    head_size = dim // n_heads
    kv_dim = n_kv_heads * head_size
    shapes = [
        ("token_embedding_table", (vocab, dim)),
        ("rms_att_weight", (n_layers, dim)),
        ("wq", (n_layers, n_heads * head_size, dim)),
        ("wk", (n_layers, kv_dim, dim)),
        ("wv", (n_layers, kv_dim, dim)),
        ("wo", (n_layers, dim, n_heads * head_size)),
        ("rms_ffn_weight", (n_layers, dim)),
        ("w1", (n_layers, hidden_dim, dim)),
        ("w2", (n_layers, dim, hidden_dim)),
        ("w3", (n_layers, hidden_dim, dim)),
        ("rms_final_weight", (dim,)),
        ("freq_cis_real", (seq_len, head_size // 2)),
        ("freq_cis_imag", (seq_len, head_size // 2)),
    ]
    if vocab_size < 0:
        shapes.append(("wcls", (vocab, dim)))
    return shapes


def _expected_size(header):
    return HEADER.size + 4 * sum(int(np.prod(s)) for _, s in _shapes(header))


class Llama2cCheckpoint:
    def __init__(self, path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            header = HEADER.unpack(f.read(HEADER.size))
        (self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads, vocab_size,
         self.seq_len) = header
        self.shared_classifier = vocab_size > 0
        self.vocab_size = abs(vocab_size)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} not a multiple of n_kv_heads {self.n_kv_heads}")
        size = _file_size(self.path)
        if size != _expected_size(header):
            raise ValueError(f"{self.path}: size {size} does not match header {header} "
                             f"(expected {_expected_size(header)})")
        data = np.fromfile(self.path, dtype="<f4", offset=HEADER.size).astype(np.float32)
        self.arrays = {}
        pos = 0
        for name, shape in _shapes(header):
            n = int(np.prod(shape))
            self.arrays[name] = data[pos:pos + n].reshape(shape)
            pos += n
        if self.shared_classifier:
            self.arrays["wcls"] = self.arrays["token_embedding_table"]

    def header_dict(self):
        return {"dim": self.dim, "hidden_dim": self.hidden_dim, "n_layers": self.n_layers,
                "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads,
                "vocab_size": self.vocab_size, "seq_len": self.seq_len,
                "shared_classifier": self.shared_classifier}


class Llama2cTokenizer:
    """SentencePiece-derived vocabulary as exported by llama2.c's tokenizer.py."""

    BYTE_PIECE = re.compile(rb"^<0x([0-9A-Fa-f]{2})>$")

    def __init__(self, path, vocab_size=None):
        with open(path, "rb") as f:
            data = f.read()
        (self.max_token_length,) = struct.unpack_from("<i", data, 0)
        pos = 4
        self.pieces, self.scores = [], []
        while pos < len(data) and (vocab_size is None or len(self.pieces) < vocab_size):
            score, n = struct.unpack_from("<fi", data, pos)
            pos += 8
            if n < 0 or pos + n > len(data):
                raise ValueError(f"{path}: corrupt entry {len(self.pieces)}")
            self.pieces.append(data[pos:pos + n])
            self.scores.append(score)
            pos += n
        if vocab_size is not None and len(self.pieces) != vocab_size:
            raise ValueError(f"{path}: has {len(self.pieces)} tokens, model wants {vocab_size}")
        self.lookup = {}
        for i, p in enumerate(self.pieces):
            self.lookup.setdefault(p, i)

    def decode_piece(self, prev_id, token_id):
        """Bytes for token_id as run.c prints it after prev_id."""
        piece = self.pieces[token_id]
        if prev_id == BOS_ID and piece.startswith(b" "):
            piece = piece[1:]
        m = self.BYTE_PIECE.match(piece)
        if m:
            piece = bytes([int(m.group(1), 16)])
        return piece

    def decode(self, ids, prev_id=None):
        """Concatenated pieces of ids (each decoded after its predecessor)."""
        out = bytearray()
        for t in ids:
            out += self.decode_piece(prev_id, t)
            prev_id = t
        return bytes(out)

    @staticmethod
    def printable(piece):
        """run.c's safe_printf: a lone byte that is neither printable nor whitespace is dropped."""
        if len(piece) == 1 and not (0x20 <= piece[0] < 0x7F or piece[0] in b" \t\n\v\f\r"):
            return b""
        return piece

    def encode(self, text, bos=True, eos=False):
        """run.c's encoder: BOS, dummy-prefix space, code points (byte fallback +3), then merge
        the adjacent pair with the highest-scoring concatenation until none is in the vocab."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = [BOS_ID] if bos else []
        if data:
            ids.append(self.lookup[b" "])
        i = 0
        while i < len(data):
            j = i + 1
            while j < len(data) and (data[j] & 0xC0) == 0x80 and j - i < 4:
                j += 1
            cp = data[i:j]
            if cp in self.lookup:
                ids.append(self.lookup[cp])
            else:
                ids.extend(b + 3 for b in cp)
            i = j
        while True:
            best_score, best_idx, best_id = -1e10, -1, -1
            for k in range(len(ids) - 1):
                merged = self.pieces[ids[k]] + self.pieces[ids[k + 1]]
                tid = self.lookup.get(merged)
                if tid is not None and self.scores[tid] > best_score:
                    best_score, best_idx, best_id = self.scores[tid], k, tid
            if best_idx < 0:
                break
            ids[best_idx:best_idx + 2] = [best_id]
        if eos:
            ids.append(EOS_ID)
        return ids
