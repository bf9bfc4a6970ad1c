"""GGUF v2/v3 reader and numpy dequantizers (independent reference implementation).

Written from the GGUF specification (ggml/docs/gguf.md) and ggml's published block layouts
(ggml-common.h). Little-endian files only.

File layout:
    magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
    kv_count x (string key, u32 value_type, value)
    tensor_count x (string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset)
    padding to a multiple of general.alignment (default 32)
    tensor data; each tensor's offset is relative to the start of this data section

dims[0] is the innermost (fastest varying, row length) dimension, so the numpy (PyTorch-order)
shape is the reversed dims list.
"""

import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
VALUE_TYPE_NAMES = {
    UINT8: "u8", INT8: "i8", UINT16: "u16", INT16: "i16", UINT32: "u32", INT32: "i32",
    FLOAT32: "f32", BOOL: "bool", STRING: "str", ARRAY: "arr", UINT64: "u64", INT64: "i64",
    FLOAT64: "f64",
}
# struct format for each fixed-size scalar type.
SCALAR_FORMATS = {
    UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
    FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d",
}

# ggml tensor types supported here: id -> (name, elements per block, bytes per block).
F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, BF16 = 0, 1, 2, 3, 8, 12, 14, 30
QK_K = 256
GGML_TYPES = {
    F32: ("F32", 1, 4),
    F16: ("F16", 1, 2),
    BF16: ("BF16", 1, 2),
    Q4_0: ("Q4_0", 32, 2 + 16),                    # f16 d; u8 qs[16]
    Q4_1: ("Q4_1", 32, 2 + 2 + 16),                # f16 d; f16 m; u8 qs[16]
    Q8_0: ("Q8_0", 32, 2 + 32),                    # f16 d; i8 qs[32]
    Q4_K: ("Q4_K", QK_K, 2 + 2 + 12 + QK_K // 2),  # f16 d; f16 dmin; u8 scales[12]; u8 qs[128]
    Q6_K: ("Q6_K", QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),  # ql[128] qh[64] i8 sc[16] f16 d
}
TYPE_BY_NAME = {v[0]: k for k, v in GGML_TYPES.items()}


def type_name(ggml_type):
    return GGML_TYPES[ggml_type][0] if ggml_type in GGML_TYPES else f"type{ggml_type}"


def tensor_nbytes(ggml_type, n_elements):
    if ggml_type not in GGML_TYPES:
        raise ValueError(f"unsupported ggml tensor type {ggml_type}")
    _, block_elems, block_bytes = GGML_TYPES[ggml_type]
    if n_elements % block_elems:
        raise ValueError(f"{type_name(ggml_type)}: {n_elements} elements is not a multiple of the "
                         f"block size {block_elems}")
    return n_elements // block_elems * block_bytes


# ----------------------------------------------------------------------------- dequantization

def f16_bits_to_f32(u8):
    """[..., 2] raw little-endian bytes -> float32 [...]."""
    return np.ascontiguousarray(u8).view("<f2")[..., 0].astype(np.float32)


def bf16_to_f32(raw_u16):
    """bfloat16 bit patterns (uint16 array) -> float32: they are the top 16 bits of a float32."""
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


def _blocks(raw, ggml_type):
    _, _, block_bytes = GGML_TYPES[ggml_type]
    return np.asarray(raw, dtype=np.uint8).reshape(-1, block_bytes)


def dequant_q4_0(raw):
    # x[j] = (low nibble of qs[j] - 8) * d, x[j + 16] = (high nibble of qs[j] - 8) * d
    b = _blocks(raw, Q4_0)
    d = f16_bits_to_f32(b[:, 0:2].reshape(-1, 1, 2))          # [nb, 1]
    qs = b[:, 2:18]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int8) - np.int8(8)
    return (q.astype(np.float32) * d).reshape(-1)


def dequant_q4_1(raw):
    # x = q * d + m with the same nibble order as Q4_0
    b = _blocks(raw, Q4_1)
    d = f16_bits_to_f32(b[:, 0:2].reshape(-1, 1, 2))
    m = f16_bits_to_f32(b[:, 2:4].reshape(-1, 1, 2))
    qs = b[:, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    return (q * d + m).reshape(-1)


def dequant_q8_0(raw):
    b = _blocks(raw, Q8_0)
    d = f16_bits_to_f32(b[:, 0:2].reshape(-1, 1, 2))
    q = np.ascontiguousarray(b[:, 2:34]).view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def q4_k_scales_mins(scales):
    """Unpack the 12-byte Q4_K scale field into 8 six-bit scales and 8 six-bit mins.

    Sub-blocks 0..3: scale = bytes[j] & 63, min = bytes[j+4] & 63.
    Sub-blocks 4..7: low 4 bits from bytes[j+4] (scale: low nibble, min: high nibble), high 2 bits
    from the top two bits of bytes[j-4] (scale) and bytes[j] (min).
    """
    s = scales.astype(np.uint8)
    sc_lo = s[:, 0:4] & 63
    mn_lo = s[:, 4:8] & 63
    sc_hi = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn_hi = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return np.concatenate([sc_lo, sc_hi], axis=1), np.concatenate([mn_lo, mn_hi], axis=1)


def dequant_q4_k(raw):
    # Super-block of 256 = 8 sub-blocks of 32. Sub-block s: y = (d * sc[s]) * q - (dmin * mn[s]).
    # qs is 4 chunks of 32 bytes; chunk c holds sub-block 2c in its low nibbles, 2c+1 in its high.
    b = _blocks(raw, Q4_K)
    d = f16_bits_to_f32(b[:, 0:2].reshape(-1, 1, 2))          # [nb, 1]
    dmin = f16_bits_to_f32(b[:, 2:4].reshape(-1, 1, 2))
    sc, mn = q4_k_scales_mins(b[:, 4:16])                      # [nb, 8] each
    qs = b[:, 16:144].reshape(-1, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.float32)
    scale = (d * sc.astype(np.float32))[:, :, None]            # [nb, 8, 1]
    offset = (dmin * mn.astype(np.float32))[:, :, None]
    return (scale * q - offset).reshape(-1)


def dequant_q6_k(raw):
    # Super-block of 256 in two halves of 128. In half h, for l in 0..31:
    #   y[128h +  0 + l] = ql[64h + l]      low nibble | (qh[32h + l] >> 0 & 3) << 4
    #   y[128h + 32 + l] = ql[64h + 32 + l] low nibble | (qh[32h + l] >> 2 & 3) << 4
    #   y[128h + 64 + l] = ql[64h + l]      high nibble | (qh[32h + l] >> 4 & 3) << 4
    #   y[128h + 96 + l] = ql[64h + 32 + l] high nibble | (qh[32h + l] >> 6 & 3) << 4
    # each minus 32, times d * scales[i // 16] (i = position in the super-block).
    b = _blocks(raw, Q6_K)
    ql = b[:, 0:128].reshape(-1, 2, 2, 32)                     # [nb, half, first/second 32, l]
    qh = b[:, 128:192].reshape(-1, 2, 32)                      # [nb, half, l]
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)  # [nb, 16]
    d = f16_bits_to_f32(b[:, 208:210].reshape(-1, 1, 2))      # [nb, 1]
    low = np.stack([ql[:, :, 0] & 0x0F, ql[:, :, 1] & 0x0F, ql[:, :, 0] >> 4, ql[:, :, 1] >> 4],
                   axis=2)                                      # [nb, 2, 4, 32]
    high = np.stack([(qh >> 0) & 3, (qh >> 2) & 3, (qh >> 4) & 3, (qh >> 6) & 3], axis=2)
    q = ((low | (high << 4)).astype(np.int16) - 32).reshape(-1, QK_K).astype(np.float32)
    scale = np.repeat(d * sc, 16, axis=1)                      # [nb, 256]
    return (scale * q).reshape(-1)


DEQUANTIZERS = {
    Q4_0: dequant_q4_0, Q4_1: dequant_q4_1, Q8_0: dequant_q8_0, Q4_K: dequant_q4_k,
    Q6_K: dequant_q6_k,
}


def dequantize(raw, ggml_type, n_elements):
    """Raw tensor bytes -> flat float32 array of n_elements."""
    raw = np.asarray(raw, dtype=np.uint8)
    expected = tensor_nbytes(ggml_type, n_elements)
    if raw.size != expected:
        raise ValueError(f"{type_name(ggml_type)}: expected {expected} bytes, got {raw.size}")
    if ggml_type == F32:
        return np.ascontiguousarray(raw).view("<f4").astype(np.float32)
    if ggml_type == F16:
        return np.ascontiguousarray(raw).view("<f2").astype(np.float32)
    if ggml_type == BF16:
        return bf16_to_f32(np.ascontiguousarray(raw).view("<u2"))
    return DEQUANTIZERS[ggml_type](raw)


# ----------------------------------------------------------------------------- reader

class TensorInfo:
    def __init__(self, name, dims, ggml_type, offset):
        self.name = name
        self.dims = list(dims)          # GGUF order: dims[0] innermost
        self.ggml_type = ggml_type
        self.offset = offset            # relative to the data section
        self.n_elements = int(np.prod(self.dims, dtype=np.int64)) if self.dims else 1

    @property
    def shape(self):
        """numpy / PyTorch order."""
        return tuple(reversed(self.dims))

    def __repr__(self):
        return f"{self.name} {type_name(self.ggml_type)} {list(self.shape)} @+{self.offset}"


class _Cursor:
    """Sequential little-endian reads from the start of a file, buffered in growing chunks."""

    def __init__(self, path):
        self.f = open(path, "rb")
        self.buf = b""
        self.pos = 0

    def take(self, n):
        while self.pos + n > len(self.buf):
            more = self.f.read(max(1 << 20, n))
            if not more:
                raise ValueError(f"GGUF: truncated file (need {n} bytes at offset {self.pos})")
            self.buf += more
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def peek_u32(self):
        value = self.u32()
        self.pos -= 4
        return value

    def scalar(self, vtype):
        fmt = SCALAR_FORMATS[vtype]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self):
        return self.scalar(UINT32)

    def u64(self):
        return self.scalar(UINT64)

    def string(self):
        n = self.u64()
        return self.take(n).decode("utf-8", errors="surrogateescape")

    def value(self, vtype):
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            elem_type = self.u32()
            count = self.u64()
            return [self.value(elem_type) for _ in range(count)]
        if vtype not in SCALAR_FORMATS:
            raise ValueError(f"GGUF: unknown metadata value type {vtype} at offset {self.pos}")
        return self.scalar(vtype)


class GGUFReader:
    """Parses a GGUF file; tensor data is memory-mapped and dequantized on request."""

    def __init__(self, path):
        self.path = str(path)
        self.mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        cur = _Cursor(self.path)
        try:
            self._parse_header(cur)
        finally:
            cur.f.close()
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0:
            raise ValueError(f"{self.path}: general.alignment must be positive")
        self.data_offset = (cur.pos + self.alignment - 1) // self.alignment * self.alignment
        for t in self.tensors.values():
            if t.offset % self.alignment:
                raise ValueError(f"tensor {t.name}: offset {t.offset} is not a multiple of the "
                                 f"alignment {self.alignment}")
            if t.ggml_type in GGML_TYPES:
                end = self.data_offset + t.offset + tensor_nbytes(t.ggml_type, t.n_elements)
                if end > len(self.mm):
                    raise ValueError(f"tensor {t.name}: data runs past the end of the file")

    def _parse_header(self, cur):
        magic = cur.take(4)
        if magic != GGUF_MAGIC:
            raise ValueError(f"{self.path}: not a GGUF file (magic {magic!r})")
        self.version = cur.u32()
        if self.version not in (2, 3):
            raise ValueError(f"{self.path}: GGUF version {self.version} unsupported (need 2 or 3)")
        n_tensors = cur.u64()
        n_kv = cur.u64()
        self.metadata = {}
        self.metadata_types = {}        # key -> (value type, array element type or None)
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.u32()
            elem_type = None
            if vtype == ARRAY:
                elem_type = cur.peek_u32()
            if key in self.metadata:
                raise ValueError(f"{self.path}: duplicate metadata key {key!r}")
            self.metadata[key] = cur.value(vtype)
            self.metadata_types[key] = (vtype, elem_type)
        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            dims = [cur.u64() for _ in range(n_dims)]
            ggml_type = cur.u32()
            offset = cur.u64()
            if name in self.tensors:
                raise ValueError(f"{self.path}: duplicate tensor name {name!r}")
            self.tensors[name] = TensorInfo(name, dims, ggml_type, offset)

    def raw(self, name):
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return self.mm[start:start + tensor_nbytes(t.ggml_type, t.n_elements)]

    def tensor(self, name):
        """Dequantized float32 array in PyTorch order (shape = reversed GGUF dims)."""
        if name not in self.tensors:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        t = self.tensors[name]
        if t.ggml_type not in GGML_TYPES:
            raise ValueError(f"tensor {name}: ggml type {t.ggml_type} is not supported by the "
                             f"reference (supported: {sorted(v[0] for v in GGML_TYPES.values())})")
        return dequantize(self.raw(name), t.ggml_type, t.n_elements).reshape(t.shape)

    def get(self, key, default=None):
        return self.metadata.get(key, default)


def describe_value(value, limit=8):
    if isinstance(value, list):
        head = ", ".join(repr(v) for v in value[:limit])
        more = f", ... ({len(value)} items)" if len(value) > limit else ""
        return f"[{head}{more}]"
    if isinstance(value, str) and len(value) > 200:
        return repr(value[:200]) + f"... ({len(value)} chars)"
    return repr(value)
