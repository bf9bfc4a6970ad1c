""".pocket package reader (independent reference), written from docs/format.md, "The .pocket package".

    [0, 64) header | section table (n_sections x 64 bytes) | sections, each at a multiple of 64
Header: "POCKETPK", u16 major (1), u16 minor, u32 header_bytes (64), u64 file_bytes,
u64 section_table_offset, u32 n_sections (<= 1024), u32 flags, u8[20] reserved, u32 CRC-32C [0, 60).
Entry: char name[16] (NUL-padded), u64 offset, u64 size, u32 crc32c, u32 flags (bit 0 required),
u8[24] reserved. Sections: meta (JSON), tokenizer, chat_template, tensors (directory), data.

Packed matrices: panels of 16 rows (last zero-padded); per panel, groups of `group` columns; a
group = codes, then 16 fp16 d (then 16 fp16 m if explicit_min). w = d*code + m in float32, or
m = -z*d (z = 8 for 4-bit, 128 for 8-bit). 8-bit: group/4 vectors of 64 bytes, byte 4r+j of
vector i = code (row r, column 4i+j); 4-bit: group/8 vectors, low nibbles quad i, high nibbles
quad i + group/8. blk.N.ffn_gate_up.weight stores gate panel i, up panel i, alternately (each
half padded to whole panels on its own: 2*ceil(d_ff/16) panels).
"""

import json
import os
import struct

import numpy as np

import gguf
from crc32c import crc32c

MAGIC = b"POCKETPK"
ALIGN = 64
MAX_SECTIONS = 1024
KNOWN_SECTIONS = ("meta", "tokenizer", "chat_template", "tensors", "data")
MANDATORY_SECTIONS = ("meta", "tensors", "data")
SMALL_SECTIONS = ("meta", "tokenizer", "chat_template", "tensors")   # CRC-checked at load
DENSE_CODES = {0: gguf.F32, 1: gguf.F16, 2: gguf.BF16, 3: gguf.Q8_0, 4: gguf.Q4_0,
               5: gguf.Q4_1, 6: gguf.Q4_K, 7: gguf.Q6_K}
META_INTS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size",
             "n_ctx_train", "bos_token_id", "eos_token_id", "pad_token_id")
META_BOOLS = ("qk_norm", "qkv_bias", "tied_output")


# ----------------------------------------------------------------------------- packed matrices

def packed_group_bytes(bits, explicit_min, group):
    return 16 * group * bits // 8 + (64 if explicit_min else 32)


def packed_panels(name, rows):
    if name.endswith("ffn_gate_up.weight"):
        if rows % 2:
            raise ValueError(f"tensor {name}: fused gate/up has an odd number of rows ({rows})")
        return 2 * (-(-(rows // 2) // 16))
    return -(-rows // 16)


def dequant_packed(raw, n_panels, cols, bits, explicit_min, group):
    """Raw packed bytes -> float32 [n_panels * 16, cols] (padding rows included)."""
    if bits not in (4, 8) or group <= 0 or group % 32 or cols % group:
        raise ValueError(f"packed: bits {bits}, group {group}, cols {cols} not allowed")
    ng, code_bytes = cols // group, 16 * group * bits // 8
    gb = packed_group_bytes(bits, explicit_min, group)
    b = np.asarray(raw, np.uint8).reshape(n_panels, ng, gb)
    codes = b[:, :, :code_bytes]
    if bits == 8:
        q = codes.reshape(n_panels, ng, group // 4, 16, 4)
    else:
        v = codes.reshape(n_panels, ng, group // 8, 16, 4)
        q = np.concatenate([v & 0x0F, v >> 4], axis=2)          # quads i, then i + group/8
    q = q.transpose(0, 3, 1, 2, 4).reshape(n_panels, 16, ng, group).astype(np.float32)

    def f16(lo):                                                # [P, G, 16] -> [P, 16, G, 1]
        a = np.ascontiguousarray(b[:, :, lo:lo + 32]).view("<f2").astype(np.float32)
        return a.transpose(0, 2, 1)[..., None]
    d = f16(code_bytes)
    m = f16(code_bytes + 32) if explicit_min else np.float32(-(8 if bits == 4 else 128)) * d
    w = d * q + m                                               # float32: product, then sum
    return w.reshape(n_panels * 16, cols)


# ----------------------------------------------------------------------------- structures

class Section:
    def __init__(self, name, offset, size, crc, flags):
        self.name, self.offset, self.size, self.crc, self.flags = name, offset, size, crc, flags

    @property
    def required(self):
        return bool(self.flags & 1)

    def __repr__(self):
        return (f"{self.name:<14} offset {self.offset:>12} size {self.size:>12} "
                f"crc32c {self.crc:08x} flags {self.flags:#x}{' (required)' if self.required else ''}")


class TensorEntry:
    def __init__(self, name, encoding, code, explicit_min, group, dims, offset, n_bytes):
        self.name, self.encoding, self.code, self.explicit_min = name, encoding, code, explicit_min
        self.group, self.dims, self.offset, self.n_bytes = group, list(dims), offset, n_bytes

    @property
    def shape(self):
        return tuple(self.dims)

    def kind(self):
        if self.encoding == 0:
            return gguf.type_name(DENSE_CODES[self.code])
        return (f"packed{self.code}_g{self.group}_" + ("min" if self.explicit_min else "sym"))

    def __repr__(self):
        return f"{self.name} {self.kind()} {list(self.shape)} @+{self.offset} ({self.n_bytes} bytes)"


class _Cursor:
    def __init__(self, buf, what):
        self.buf, self.pos, self.what = buf, 0, what

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"{self.what}: truncated (need {n} bytes at offset {self.pos}, "
                             f"size {len(self.buf)})")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))


class Tokenizer:
    """The tokenizer section: kind (0 byte-level BPE, 1 llama2.c), special ids, tokens (bytes, in
    stored form), types, scores (or None), merges [n, 2] token ids."""

    def __init__(self, buf):
        c = _Cursor(buf, "tokenizer section")
        magic, = c.unpack("<4s")
        if magic != b"PTOK":
            raise ValueError(f"tokenizer section: magic {magic!r}, expected b'PTOK'")
        self.version, = c.unpack("<I")
        if self.version != 1:
            raise ValueError(f"tokenizer section: version {self.version} unsupported")
        self.kind, self.normalize_nfc, self.add_bos, zero = c.unpack("<4B")
        if self.kind not in (0, 1) or zero != 0:
            raise ValueError(f"tokenizer section: kind {self.kind}, padding byte {zero}")
        self.bos, self.eos, self.pad, self.unk = c.unpack("<4i")
        n, = c.unpack("<I")
        self.pre = c.take(n).decode("utf-8")
        n_tokens, = c.unpack("<I")
        self.types = np.frombuffer(c.take(n_tokens), np.uint8)
        if n_tokens and (self.types.min() < 1 or self.types.max() > 6):
            raise ValueError("tokenizer section: token type outside 1..6")
        offsets = np.frombuffer(c.take(4 * (n_tokens + 1)), "<u4").astype(np.int64)
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise ValueError("tokenizer section: offsets must start at 0 and not decrease")
        blob = c.take(int(offsets[-1]))
        self.tokens = [blob[offsets[i]:offsets[i + 1]] for i in range(n_tokens)]
        has_scores, = c.unpack("<I")
        if has_scores not in (0, 1):
            raise ValueError(f"tokenizer section: has_scores {has_scores}")
        self.scores = np.frombuffer(c.take(4 * n_tokens), "<f4").copy() if has_scores else None
        n_merges, = c.unpack("<I")
        self.merges = np.frombuffer(c.take(8 * n_merges), "<u4").reshape(-1, 2).astype(np.int64)
        if c.pos != len(buf):
            raise ValueError(f"tokenizer section: {len(buf) - c.pos} trailing bytes")
        for what, v in (("bos", self.bos), ("eos", self.eos), ("pad", self.pad), ("unk", self.unk)):
            if not -1 <= v < n_tokens:
                raise ValueError(f"tokenizer section: {what} id {v} out of range")
        if self.merges.size and self.merges.max() >= n_tokens:
            raise ValueError("tokenizer section: merge refers to a token id out of range")

    @property
    def strings(self):
        return [t.decode("utf-8", errors="surrogateescape") for t in self.tokens]

    def __repr__(self):
        return (f"kind {self.kind} pre {self.pre!r} nfc {self.normalize_nfc} add_bos {self.add_bos} "
                f"tokens {len(self.tokens)} bos {self.bos} eos {self.eos} pad {self.pad} "
                f"unk {self.unk} scores {self.scores is not None} merges {len(self.merges)}")


# ----------------------------------------------------------------------------- reader

def is_pocket(path):
    with open(path, "rb") as f:
        return f.read(8) == MAGIC


class PocketFile:
    def __init__(self, path, verify_data=False):
        self.path = str(path)
        size = os.path.getsize(self.path)
        if size < 64:
            raise ValueError(f"{self.path}: {size} bytes, too short for a .pocket header")
        self.mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._parse_header(size)
        self._parse_table()
        for name in SMALL_SECTIONS:
            if name in self.sections:
                self.check_crc(name)
        if verify_data:
            self.check_crc("data")
        self._parse_meta()
        self.tokenizer = Tokenizer(self.section_bytes("tokenizer")) \
            if "tokenizer" in self.sections else None
        self.chat_template = self.section_bytes("chat_template").decode("utf-8") \
            if "chat_template" in self.sections else None
        self._parse_directory()
        self._fused = (None, None)              # last fused tensor dequantized (name, array)

    def _err(self, msg):
        return ValueError(f"{self.path}: {msg}")

    def _parse_header(self, size):
        h = bytes(self.mm[:64])
        (magic, self.version_major, self.version_minor, header_bytes, self.file_bytes,
         self.table_offset, n_sections, self.flags) = struct.unpack_from("<8sHHIQQII", h)
        if magic != MAGIC:
            raise self._err(f"not a .pocket file (magic {magic!r})")
        stored, = struct.unpack_from("<I", h, 60)
        if crc32c(h[:60]) != stored:
            raise self._err(f"header checksum mismatch (stored {stored:08x}, "
                            f"computed {crc32c(h[:60]):08x})")
        if self.version_major != 1:
            raise self._err(f"version {self.version_major}.{self.version_minor} unsupported (need 1.x)")
        if header_bytes != 64:
            raise self._err(f"header_bytes {header_bytes}, expected 64")
        if self.file_bytes != size:
            raise self._err(f"file is {size} bytes but the header says {self.file_bytes}"
                            + (" (truncated)" if size < self.file_bytes else ""))
        if n_sections > MAX_SECTIONS:
            raise self._err(f"{n_sections} sections (at most {MAX_SECTIONS})")
        self.table_end = self.table_offset + 64 * n_sections
        if self.table_offset < 64 or self.table_end > size:
            raise self._err(f"section table [{self.table_offset}, {self.table_end}) outside the file")
        self.n_sections = n_sections

    def _parse_table(self):
        self.sections = {}
        for i in range(self.n_sections):
            e = bytes(self.mm[self.table_offset + 64 * i:self.table_offset + 64 * (i + 1)])
            raw_name, offset, size, crc, flags = struct.unpack_from("<16sQQII", e)
            name = raw_name.split(b"\0", 1)[0]
            if not name or raw_name[len(name):].strip(b"\0"):
                raise self._err(f"section entry {i}: bad name {raw_name!r}")
            name = name.decode("utf-8")
            if name in self.sections:
                raise self._err(f"duplicate section {name!r}")
            if offset % ALIGN or offset < self.table_end or offset + size > self.file_bytes:
                raise self._err(f"section {name!r} [{offset}, {offset + size}) misplaced "
                                f"(64-aligned, after the table at {self.table_end}, inside the file)")
            self.sections[name] = Section(name, offset, size, crc, flags)
        spans = sorted((s.offset, s.offset + s.size, s.name) for s in self.sections.values())
        for a, b in zip(spans, spans[1:]):
            if b[0] < a[1]:
                raise self._err(f"sections {a[2]!r} and {b[2]!r} overlap")
        for s in self.sections.values():
            if s.name not in KNOWN_SECTIONS and s.required:
                raise self._err(f"unknown required section {s.name!r}")
        for name in MANDATORY_SECTIONS:
            if name not in self.sections:
                raise self._err(f"missing section {name!r}")

    def section_bytes(self, name):
        s = self.sections[name]
        return bytes(self.mm[s.offset:s.offset + s.size])

    def crc_ok(self, name):
        s = self.sections[name]
        return crc32c(self.mm[s.offset:s.offset + s.size]) == s.crc

    def check_crc(self, name):
        if not self.crc_ok(name):
            raise self._err(f"section {name!r}: CRC-32C mismatch (corrupt)")

    def _parse_meta(self):
        try:
            meta = json.loads(self.section_bytes("meta").decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise self._err(f"meta: not UTF-8 JSON: {e}")
        if not isinstance(meta, dict) or meta.get("format") != "pocket":
            raise self._err("meta: not a JSON object with format \"pocket\"")
        for k in META_INTS + META_BOOLS + ("architecture", "rope_base", "rms_eps", "rope_style"):
            if k not in meta:
                raise self._err(f"meta: missing key {k!r}")
        for k in META_INTS:
            if not isinstance(meta[k], int) or isinstance(meta[k], bool):
                raise self._err(f"meta: {k} must be an integer, got {meta[k]!r}")
        for k in META_BOOLS:
            if not isinstance(meta[k], bool):
                raise self._err(f"meta: {k} must be a boolean, got {meta[k]!r}")
        self.meta = meta

    def _parse_directory(self):
        data = self.sections["data"]
        c = _Cursor(self.section_bytes("tensors"), "tensors section")
        n, = c.unpack("<I")
        self.tensors = {}
        for _ in range(n):
            ln, = c.unpack("<H")
            name = c.take(ln).decode("utf-8")
            encoding, code, explicit_min, n_dims, group = c.unpack("<4BI")
            if not 1 <= n_dims <= 4:
                raise self._err(f"tensor {name}: n_dims {n_dims}")
            dims = c.unpack(f"<{n_dims}q")
            offset, n_bytes = c.unpack("<QQ")
            if name in self.tensors:
                raise self._err(f"duplicate tensor {name!r}")
            t = TensorEntry(name, encoding, code, explicit_min, group, dims, offset, n_bytes)
            want = self._expected_bytes(t)
            if n_bytes != want:
                raise self._err(f"tensor {name}: n_bytes {n_bytes}, shape and encoding imply {want}")
            if offset % ALIGN or offset + n_bytes > data.size:
                raise self._err(f"tensor {name}: [{offset}, {offset + n_bytes}) not 64-aligned or "
                                f"outside the data section ({data.size} bytes)")
            self.tensors[name] = t
        if c.pos != len(c.buf):
            raise self._err(f"tensors section: {len(c.buf) - c.pos} trailing bytes")
        spans = sorted((t.offset, t.offset + t.n_bytes, t.name) for t in self.tensors.values())
        for a, b in zip(spans, spans[1:]):
            if b[0] < a[1]:
                raise self._err(f"tensors {a[2]} and {b[2]} overlap")

    def _expected_bytes(self, t):
        if any(d <= 0 for d in t.dims):
            raise self._err(f"tensor {t.name}: dims {t.dims}")
        if t.encoding == 0:
            if t.name.endswith("ffn_gate_up.weight"):
                raise self._err(f"tensor {t.name}: the fused gate/up matrix is defined only packed")
            if t.code not in DENSE_CODES or t.group != 0 or t.explicit_min != 0:
                raise self._err(f"tensor {t.name}: dense code {t.code}, group {t.group}, "
                                f"explicit_min {t.explicit_min}")
            ggml_type = DENSE_CODES[t.code]
            if t.dims[-1] % gguf.GGML_TYPES[ggml_type][1]:
                raise self._err(f"tensor {t.name}: rows of {t.dims[-1]} are not whole "
                                f"{gguf.type_name(ggml_type)} blocks")
            return gguf.tensor_nbytes(ggml_type, int(np.prod(t.dims)))
        if t.encoding != 1 or t.code not in (4, 8) or t.explicit_min not in (0, 1) \
                or len(t.dims) != 2 or t.group <= 0 or t.group % 32 or t.dims[1] % t.group:
            raise self._err(f"tensor {t.name}: bad packed entry (encoding {t.encoding}, bits "
                            f"{t.code}, explicit_min {t.explicit_min}, group {t.group}, dims {t.dims})")
        groups = packed_panels(t.name, t.dims[0]) * (t.dims[1] // t.group)
        return groups * packed_group_bytes(t.code, t.explicit_min, t.group)

    def raw(self, name):
        t = self.tensors[name]
        start = self.sections["data"].offset + t.offset
        return self.mm[start:start + t.n_bytes]

    def tensor(self, name):
        """Stored tensor as float32. Packed: [rows, cols] (padding dropped); ffn_gate_up as
        [gate; up] rows (2 d_ff), i.e. the panels de-interleaved."""
        if name not in self.tensors:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        t = self.tensors[name]
        if t.encoding == 0:
            return gguf.dequantize(self.raw(name), DENSE_CODES[t.code],
                                   int(np.prod(t.dims))).reshape(t.shape)
        rows, cols = t.dims
        n_panels = packed_panels(name, rows)
        w = dequant_packed(self.raw(name), n_panels, cols, t.code, t.explicit_min, t.group)
        if name.endswith("ffn_gate_up.weight"):
            p = w.reshape(n_panels, 16, cols)
            half = rows // 2
            return np.concatenate([p[0::2].reshape(-1, cols)[:half], p[1::2].reshape(-1, cols)[:half]])
        return w[:rows]

    def _fused_tensor(self, name):
        if self._fused[0] != name:
            self._fused = (name, self.tensor(name))
        return self._fused[1]

    def layer_tensor(self, layer, part):
        """blk.{layer}.{part}, falling back to the fused tensors for attn_q/k/v.{weight,bias} and
        ffn_gate/ffn_up.weight; None when absent."""
        name = f"blk.{layer}.{part}"
        if name in self.tensors:
            return self.tensor(name)
        m = self.meta
        stem, _, suffix = part.partition(".")
        if stem in ("attn_q", "attn_k", "attn_v") and f"blk.{layer}.attn_qkv.{suffix}" in self.tensors:
            qkv = self._fused_tensor(f"blk.{layer}.attn_qkv.{suffix}")
            q_dim, kv_dim = m["n_heads"] * m["head_dim"], m["n_kv_heads"] * m["head_dim"]
            if qkv.shape[0] != q_dim + 2 * kv_dim:
                raise self._err(f"blk.{layer}.attn_qkv.{suffix}: {qkv.shape[0]} rows, expected "
                                f"q_dim + 2 kv_dim = {q_dim + 2 * kv_dim}")
            lo = {"attn_q": 0, "attn_k": q_dim, "attn_v": q_dim + kv_dim}[stem]
            return qkv[lo:lo + (q_dim if stem == "attn_q" else kv_dim)]
        if part in ("ffn_gate.weight", "ffn_up.weight") \
                and f"blk.{layer}.ffn_gate_up.weight" in self.tensors:
            gu = self._fused_tensor(f"blk.{layer}.ffn_gate_up.weight")
            if gu.shape[0] != 2 * m["d_ff"]:
                raise self._err(f"blk.{layer}.ffn_gate_up.weight: {gu.shape[0]} rows, expected 2 d_ff")
            return gu[:m["d_ff"]] if part == "ffn_gate.weight" else gu[m["d_ff"]:]
        return None

    def logical_tensor(self, name):
        """A stored tensor, or a part of a fused one (blk.N.attn_q.weight, blk.N.ffn_up.weight...)."""
        if name in self.tensors:
            return self.tensor(name)
        parts = name.split(".", 2)
        if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
            a = self.layer_tensor(int(parts[1]), parts[2])
            if a is not None:
                return a
        raise KeyError(f"{self.path}: no tensor named {name!r} (stored or fused)")
