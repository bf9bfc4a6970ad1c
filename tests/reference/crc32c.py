"""CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF), numpy.

Table-driven. Inputs of 4 KiB or more are cut into equal chunks whose registers are computed side by
side (slicing-by-4) and then combined: the register update is linear over GF(2), so
reg(a || b) = shift(|b|) reg(a) ^ f(b), where shift(n) is the 32x32 bit matrix of n zero bytes and
f(b) the register after b from 0. Check value (RFC 3720): crc32c(b"123456789") == 0xE3069283.
"""

import numpy as np

CRC32C_POLY = 0x82F63B78        # Castagnoli, reflected


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (CRC32C_POLY if c & 1 else 0)
        table.append(c)
    return table


_TABLE = _make_table()
_TABLE_NP = np.array(_TABLE, dtype=np.uint32)
# A GF(2)-linear map on the 32-bit register is stored as its 32 columns (images of bit i).
_ZERO_BYTE = [_TABLE[(1 << i) & 0xFF] ^ ((1 << i) >> 8) for i in range(32)]


def _apply(cols, x):
    out, i = 0, 0
    while x:
        if x & 1:
            out ^= cols[i]
        x >>= 1
        i += 1
    return out


def _compose(b, a):                         # b after a
    return [_apply(b, c) for c in a]


_POW2 = [_ZERO_BYTE]                        # _POW2[k] = register after 2^k zero bytes


def _shift(n):
    """Linear map: the register after n zero bytes."""
    m = None
    k = 0
    while n:
        while len(_POW2) <= k:
            _POW2.append(_compose(_POW2[-1], _POW2[-1]))
        if n & 1:
            m = _POW2[k] if m is None else _compose(_POW2[k], m)
        n >>= 1
        k += 1
    return m if m is not None else [1 << i for i in range(32)]


def _apply_vec(cols, x):
    """Apply a linear map to a uint32 array via four 256-entry byte tables."""
    out = np.zeros_like(x)
    for k in range(4):
        t = [0] * 256
        for v in range(1, 256):
            low = (v & -v).bit_length() - 1
            t[v] = t[v & (v - 1)] ^ cols[8 * k + low]
        out ^= np.array(t, dtype=np.uint32)[(x >> np.uint32(8 * k)) & np.uint32(0xFF)]
    return out


_SLICE = [_TABLE_NP]                        # _SLICE[k][b]: byte b followed by k zero bytes
for _ in range(3):
    _SLICE.append(_TABLE_NP[_SLICE[-1] & 0xFF] ^ (_SLICE[-1] >> np.uint32(8)))


def _linear_part(data):
    """Register after `data` starting from 0 (leading zero bytes leave a zero register unchanged,
    so the data is front-padded and cut into k equal chunks processed side by side, 4 bytes a
    step with slicing-by-4 tables; chunk registers are then folded pairwise)."""
    n = data.size
    k = 1 << max(0, min(14, (n // 1024).bit_length() - 1))
    length = -(-n // (4 * k)) * 4
    if k * length != n:
        data = np.concatenate([np.zeros(k * length - n, np.uint8), data])
    x = np.ascontiguousarray(data).view("<u4").reshape(k, length // 4)
    t3, t2, t1, t0 = _SLICE[3], _SLICE[2], _SLICE[1], _SLICE[0]
    state = np.zeros(k, np.uint32)
    for j in range(length // 4):
        b = (state ^ x[:, j]).astype("<u4").view(np.uint8).reshape(k, 4)
        state = t3[b[:, 0]] ^ t2[b[:, 1]] ^ t1[b[:, 2]] ^ t0[b[:, 3]]
    m = _shift(length)
    while state.size > 1:                   # f(a||b) = shift(|b|) f(a) ^ f(b)
        state = _apply_vec(m, state[0::2]) ^ state[1::2]
        m = _compose(m, m)
    return int(state[0])


def crc32c(data, crc=0):
    """CRC-32C of data (bytes or uint8 array); crc chains like zlib.crc32."""
    data = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) \
        else np.asarray(data, np.uint8).reshape(-1)
    reg = crc ^ 0xFFFFFFFF
    if data.size < 4096:
        for b in data.tobytes():
            reg = _TABLE[(reg ^ b) & 0xFF] ^ (reg >> 8)
        return reg ^ 0xFFFFFFFF
    reg = _apply(_shift(data.size), reg)
    block = 1 << 24
    acc = 0
    for start in range(0, data.size, block):
        part = data[start:start + block]
        acc = _apply(_shift(part.size), acc) ^ _linear_part(part)
    return (reg ^ acc) ^ 0xFFFFFFFF
