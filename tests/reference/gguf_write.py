"""A minimal GGUF v3 writer, for building test files (see gguf.py for the layout).

Usage:
    w = GGUFWriter(alignment=64)
    w.add("general.architecture", gguf.STRING, "llama")
    w.add("llama.block_count", gguf.UINT32, 2)
    w.add("tokenizer.ggml.scores", gguf.ARRAY, [0.0, 1.0], elem_type=gguf.FLOAT32)
    w.add_array_tensor("token_embd.weight", np.zeros((16, 8), np.float32))           # F32
    w.add_array_tensor("blk.0.attn_q.weight", w_q, ggml_type=gguf.F16)                 # F16/BF16
    w.add_raw_tensor("blk.0.ffn_up.weight", [8, 32], gguf.Q8_0, raw_block_bytes)       # GGUF dims
    w.write("model.gguf")

general.alignment is written into the metadata automatically when it is not 32.
"""

import struct

import numpy as np

import gguf


def f32_to_bf16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even (NaN kept quiet)."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    rounded = np.where(nan, (bits >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16)


def _encode_value(vtype, value, elem_type=None):
    if vtype == gguf.STRING:
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return struct.pack("<Q", len(data)) + data
    if vtype == gguf.ARRAY:
        if elem_type is None:
            raise ValueError("ARRAY values need elem_type")
        out = struct.pack("<IQ", elem_type, len(value))
        for v in value:
            if elem_type == gguf.ARRAY:
                raise ValueError("nested arrays: pass (elem_type, list) pairs via _encode_value")
            out += _encode_value(elem_type, v)
        return out
    return struct.pack(gguf.SCALAR_FORMATS[vtype], value)


class GGUFWriter:
    def __init__(self, alignment=gguf.DEFAULT_ALIGNMENT, version=3):
        self.alignment = alignment
        self.version = version
        self.kv = []            # (key, vtype, value, elem_type)
        self.tensors = []       # (name, gguf dims, ggml_type, raw bytes)

    def add(self, key, vtype, value, elem_type=None):
        self.kv.append((key, vtype, value, elem_type))

    def add_raw_tensor(self, name, dims, ggml_type, raw):
        raw = bytes(raw)
        n = int(np.prod(dims, dtype=np.int64))
        if len(raw) != gguf.tensor_nbytes(ggml_type, n):
            raise ValueError(f"{name}: {len(raw)} bytes does not match {dims} of "
                             f"{gguf.type_name(ggml_type)}")
        self.tensors.append((name, list(dims), ggml_type, raw))

    def add_array_tensor(self, name, array, ggml_type=gguf.F32):
        a = np.asarray(array)
        dims = list(reversed(a.shape))      # GGUF order: innermost first
        if ggml_type == gguf.F32:
            raw = a.astype("<f4").tobytes()
        elif ggml_type == gguf.F16:
            raw = a.astype("<f2").tobytes()
        elif ggml_type == gguf.BF16:
            raw = f32_to_bf16_bits(a).astype("<u2").tobytes()
        else:
            raise ValueError("add_array_tensor handles F32/F16/BF16; use add_raw_tensor for blocks")
        self.add_raw_tensor(name, dims, ggml_type, raw)

    def _pad(self, n):
        return (n + self.alignment - 1) // self.alignment * self.alignment

    def to_bytes(self):
        kv = list(self.kv)
        if self.alignment != gguf.DEFAULT_ALIGNMENT and not any(k == "general.alignment" for k, *_ in kv):
            kv.insert(0, ("general.alignment", gguf.UINT32, self.alignment, None))
        out = bytearray(gguf.GGUF_MAGIC)
        out += struct.pack("<IQQ", self.version, len(self.tensors), len(kv))
        for key, vtype, value, elem_type in kv:
            out += _encode_value(gguf.STRING, key) + struct.pack("<I", vtype)
            out += _encode_value(vtype, value, elem_type)
        offset = 0
        offsets = []
        for name, dims, ggml_type, raw in self.tensors:
            offsets.append(offset)
            out += _encode_value(gguf.STRING, name) + struct.pack("<I", len(dims))
            out += struct.pack(f"<{len(dims)}Q", *dims)
            out += struct.pack("<IQ", ggml_type, offset)
            offset = self._pad(offset + len(raw))
        out += b"\0" * (self._pad(len(out)) - len(out))
        data_start = len(out)
        for (name, dims, ggml_type, raw), off in zip(self.tensors, offsets):
            out += b"\0" * (data_start + off - len(out))
            out += raw
        return bytes(out)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())
