"""Update compressors' arithmetic and wire formats (numpy only): what each encoder puts on the wire, byte for byte.

Every encoder here returns the message as a ``bytes`` string, the receiver decodes from those bytes alone (with
the element count and the channel's settings, which both ends know), and the message's length is a function of
the element count and the settings only, never of the values: the length the driver charges
(``encoded_bytes``) is the length of this string. All multi-byte fields are little-endian.

* QSGD (Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD: Communication-Efficient SGD via Gradient Quantization
  and Encoding", NeurIPS 2017): per bucket of ``bucket`` values one float32 L2 norm, then per value a sign bit
  and its level ``0..s`` in ``⌈log₂(s+1)⌉`` bits, packed contiguously (the fixed-length "dense" layout; the
  paper's Elias coding has a data-dependent length). Stochastic rounding makes it unbiased.
* Scaled sign (Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD and other Gradient Compression
  Schemes", ICML 2019): one float32 scale ``‖p‖₁/d`` and one sign bit per value.
* Sparse messages (Stich, Cordonnier, Jaggi, "Sparsified SGD with Memory", NeurIPS 2018; Lin, Han, Mao, Wang,
  Dally, "Deep Gradient Compression", ICLR 2018): a 1-byte index-scheme tag, the kept indices (32-bit absolute
  indices or a bitmap of ``⌈m/8⌉`` bytes, whichever is smaller for ``k`` of ``m``: a choice fixed by the shape),
  then the ``k`` values as float32 or float16. Random-k sends an 8-byte seed instead of indices: the receiver
  draws the same indices. Opt-in, a length that depends on the values (``exact``): the smallest of the two
  and of the gaps between indices as LEB128 varints (7 bits a byte), as measured on the index set.

Error feedback (the "memory" of Stich et al. and Karimireddy et al.): the sender adds its residual ``e`` to the
vector, ``p = v + e``, sends ``C(p)``, and keeps ``e ← p − C(p)`` (what was not sent), where ``C(p)`` is what the
receiver decodes: the residual holds exactly the mass not delivered.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["level_bits", "qsgd_bytes", "qsgd_encode", "qsgd_decode", "qsgd_encode_exact", "qsgd_decode_exact", "sign_bytes", "sign_encode", "sign_decode",
           "kept", "index_scheme", "varint_encode", "varint_decode", "polyline_encode", "polyline_decode", "sparse_bytes", "sparse_encode", "sparse_decode", "randk_bytes", "randk_indices",
           "randk_encode", "randk_decode", "top_indices", "pack_bits", "unpack_bits"]

_INT32, _BITMAP, _VARINT = 0, 1, 2  # the sparse index-scheme tags


# -- bit fields ------------------------------------------------------------------------------------------------

def pack_bits(codes: np.ndarray, width: int) -> bytes:
    """``codes`` (non-negative integers below ``2**width``, ``width`` ≤ 32) as consecutive ``width``-bit fields,
    least significant bit first, the last byte padded with zeros."""
    size = 1 if width <= 8 else 4  # each code's little-endian bytes, its bits unpacked and the low ``width`` kept
    c = np.ascontiguousarray(codes, dtype="<u1" if size == 1 else "<u4")
    bits = np.unpackbits(c.view(np.uint8).reshape(-1, size), axis=1, bitorder="little")[:, :width]
    return np.packbits(bits.reshape(-1), bitorder="little").tobytes()


def unpack_bits(data: bytes | memoryview, count: int, width: int) -> np.ndarray:
    """The ``count`` ``width``-bit fields :func:`pack_bits` wrote, as uint32."""
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little", count=count * width)
    packed = np.packbits(bits.reshape(count, width), axis=1, bitorder="little")  # each field's bytes, zero-padded
    if width <= 8:
        return packed[:, 0].astype(np.uint32)
    full = np.zeros((count, 4), dtype=np.uint8)
    full[:, :packed.shape[1]] = packed
    return full.view("<u4").reshape(count).astype(np.uint32)


# -- QSGD ------------------------------------------------------------------------------------------------------

def level_bits(levels: int) -> int:
    """Bits of one level ``0..s``: ``⌈log₂(s+1)⌉``."""
    return max(1, math.ceil(math.log2(int(levels) + 1)))


def qsgd_bytes(elements: int, levels: int, bucket: int) -> int:
    """``4·⌈m/bucket⌉ + ⌈m·(1 + ⌈log₂(s+1)⌉)/8⌉``: the norms, then a sign bit and a level per value."""
    m = int(elements)
    return 4 * math.ceil(m / bucket) + math.ceil(m * (1 + level_bits(levels)) / 8)


def qsgd_encode(vector: np.ndarray, levels: int, bucket: int, rng: np.random.Generator) -> bytes:
    """QSGD's stochastic quantiser per bucket: ``ℓ = ⌊s|v_i|/‖v‖₂⌋``, raised to ``ℓ+1`` with probability
    ``s|v_i|/‖v‖₂ − ℓ``; the message is the buckets' float32 norms, then ``(sign, level)`` per value."""
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    m, s = v.size, int(levels)
    nb = math.ceil(m / bucket)
    padded = np.zeros(nb * bucket, dtype=np.float32)
    padded[:m] = v
    norms = np.sqrt(np.square(padded.reshape(nb, bucket), dtype=np.float64).sum(axis=1)).astype(np.float32)
    scale = np.repeat(norms, bucket)[:m].astype(np.float64)  # the norm the receiver sees (float32), per value
    safe = np.where(scale > 0, scale, 1.0)
    r = np.where(scale > 0, s * np.abs(v.astype(np.float64)) / safe, 0.0)
    low = np.floor(r)
    level = (low + (rng.random(m) < (r - low))).astype(np.uint32)
    level = np.minimum(level, s)  # r ≤ s up to rounding of the float32 norm
    codes = (level << 1) | (v < 0).astype(np.uint32)
    return norms.tobytes() + pack_bits(codes, 1 + level_bits(s))


def _bit_fields(values: np.ndarray, widths: np.ndarray, lengths: np.ndarray) -> bytes:
    """Consecutive fields, field ``i`` ``lengths[i]`` bits long with ``values[i]`` in its last ``widths[i]`` bits
    (most significant first) and zeros before: an Elias-γ code when ``lengths = 2·widths − 1``."""
    v, w, n = (np.asarray(a, dtype=np.int64) for a in (values, widths, lengths))
    ends = np.cumsum(n)
    bits = np.zeros(int(ends[-1]) if n.size else 0, dtype=np.uint8)
    field = np.repeat(np.arange(v.size), w)
    j = np.arange(field.size) - np.repeat(np.cumsum(w) - w, w)        # 0 .. w−1 within a field's payload
    bits[np.repeat(ends - w, w) + j] = (v[field] >> (w[field] - 1 - j)) & 1
    return np.packbits(bits).tobytes()


def _gamma_widths(x: np.ndarray) -> np.ndarray:
    """``⌊log₂ x⌋ + 1``: the payload bits of Elias-γ of ``x ≥ 1`` (the code is twice that, less one)."""
    return np.floor(np.log2(np.asarray(x, dtype=np.float64))).astype(np.int64) + 1


def qsgd_encode_exact(vector: np.ndarray, levels: int, bucket: int, rng: np.random.Generator) -> bytes:
    """QSGD with the paper's variable-length coding: the buckets' float32 norms, then Elias-γ of (the count of
    non-zero levels + 1), then per non-zero level Elias-γ of (the zeros skipped + 1), its sign bit and Elias-γ of
    the level; the same draws as :func:`qsgd_encode`, so both decode to the same vector."""
    dense = qsgd_encode(vector, levels, bucket, rng)
    m = int(np.asarray(vector).size)
    nb = math.ceil(m / bucket)
    codes = unpack_bits(memoryview(dense)[4 * nb:], m, 1 + level_bits(levels))
    nz = np.flatnonzero(codes >> 1)
    runs = np.diff(nz, prepend=-1)                                    # zeros skipped + 1
    values = np.concatenate([[nz.size + 1], np.stack([runs, codes[nz] & 1, codes[nz] >> 1], axis=1).reshape(-1)])
    widths = _gamma_widths(np.maximum(values, 1))
    lengths = 2 * widths - 1
    sign = np.arange(values.size) % 3 == 2                             # the raw sign bits: one bit each
    widths[sign], lengths[sign] = 1, 1
    return dense[:4 * nb] + _bit_fields(values, widths, lengths)


def qsgd_decode_exact(message: bytes, elements: int, levels: int, bucket: int) -> np.ndarray:
    """The vector :func:`qsgd_encode_exact` encoded (read field by field: the lengths are in the stream)."""
    m, s = int(elements), int(levels)
    nb = math.ceil(m / bucket)
    bits = np.unpackbits(np.frombuffer(message, dtype=np.uint8, offset=4 * nb)).tolist()
    at = 0

    def gamma() -> int:
        nonlocal at
        zeros = 0
        while bits[at] == 0:
            zeros += 1
            at += 1
        x = 0
        for b in bits[at:at + zeros + 1]:
            x = (x << 1) | b
        at += zeros + 1
        return x

    level = np.zeros(m, dtype=np.float64)
    sign = np.ones(m, dtype=np.float64)
    pos = -1
    for _ in range(gamma() - 1):
        pos += gamma()
        sign[pos] = -1.0 if bits[at] else 1.0
        at += 1
        level[pos] = gamma()
    norms = np.frombuffer(message, dtype=np.float32, count=nb)
    return (np.repeat(norms, bucket)[:m].astype(np.float64) * sign * level / s).astype(np.float32)


def qsgd_decode(message: bytes, elements: int, levels: int, bucket: int) -> np.ndarray:
    """``‖v‖₂ · sign · ℓ/s`` per value (float32)."""
    m, s = int(elements), int(levels)
    nb = math.ceil(m / bucket)
    norms = np.frombuffer(message, dtype=np.float32, count=nb)
    codes = unpack_bits(memoryview(message)[4 * nb:], m, 1 + level_bits(s))
    sign = 1.0 - 2.0 * (codes & 1).astype(np.float64)
    value = np.repeat(norms, bucket)[:m].astype(np.float64) * sign * (codes >> 1).astype(np.float64) / s
    return value.astype(np.float32)


# -- scaled sign -----------------------------------------------------------------------------------------------

def sign_bytes(elements: int) -> int:
    """``4 + ⌈m/8⌉``: the float32 scale and one bit per value."""
    return 4 + math.ceil(int(elements) / 8)


def sign_encode(p: np.ndarray) -> bytes:
    """``(‖p‖₁/d) · sign(p)``: the float32 scale, then a bit per value (1: negative; zero counts as positive,
    one bit cannot say zero)."""
    p = np.asarray(p, dtype=np.float32).reshape(-1)
    scale = np.float32(np.abs(p, dtype=np.float64).sum() / max(p.size, 1))
    return np.array([scale], dtype=np.float32).tobytes() + np.packbits(p < 0, bitorder="little").tobytes()


def sign_decode(message: bytes, elements: int) -> np.ndarray:
    """The scale times ±1 per value (float32)."""
    m = int(elements)
    scale = np.frombuffer(message, dtype=np.float32, count=1)[0]
    neg = np.unpackbits(np.frombuffer(message, dtype=np.uint8, offset=4), bitorder="little", count=m)
    return np.where(neg.astype(bool), -scale, scale).astype(np.float32)


# -- sparse messages -------------------------------------------------------------------------------------------

def kept(elements: int, ratio: float) -> int:
    """Values kept of ``m``: ``⌈ratio·m⌉``, at least 1 and at most ``m``."""
    m = int(elements)
    return min(m, max(1, math.ceil(ratio * m)))


def index_scheme(elements: int, k: int, scheme: str) -> int:
    """The index tag for ``k`` of ``m``: ``auto`` takes the bitmap where it is smaller (``⌈m/8⌉ < 4k``)."""
    if scheme == "auto":
        return _BITMAP if math.ceil(int(elements) / 8) < 4 * k else _INT32
    return _BITMAP if scheme == "bitmap" else _INT32


def sparse_bytes(elements: int, k: int, scheme: str, value_bytes: int) -> int:
    """``1`` (the tag) + the indices (``4k``, or ``⌈m/8⌉`` as a bitmap) + ``k`` values."""
    tag = index_scheme(elements, k, scheme)
    return 1 + (math.ceil(int(elements) / 8) if tag == _BITMAP else 4 * k) + k * value_bytes


def _groups_encode(x: np.ndarray, bits: int, offset: int) -> bytes:
    """Non-negative integers in groups of ``bits`` bits, least significant first, one byte each: the group, the
    bit ``1 << bits`` set on every group but a number's last, plus ``offset`` (LEB128: 7 bits, offset 0; the
    polyline algorithm: 5 bits, offset 63)."""
    x = np.asarray(x, dtype=np.uint64)
    width = np.floor(np.log2(np.maximum(x, 1).astype(np.float64))).astype(np.int64) + 1
    groups = np.maximum(1, -(-width // bits))
    start = np.concatenate([[0], np.cumsum(groups)[:-1]]).astype(np.int64)
    out = np.zeros(int(groups.sum()), dtype=np.uint8)
    mask, flag = np.uint64((1 << bits) - 1), 1 << bits
    for t in range(int(groups.max()) if x.size else 0):
        has = groups > t
        more = (groups - 1 > t)[has].astype(np.uint8) * np.uint8(flag)
        out[start[has] + t] = ((x[has] >> np.uint64(bits * t)) & mask).astype(np.uint8) | more
    return (out + np.uint8(offset)).tobytes()


def _groups_decode(data: bytes | memoryview, bits: int, offset: int) -> np.ndarray:
    """The integers :func:`_groups_encode` wrote (int64)."""
    b = np.frombuffer(data, dtype=np.uint8) - np.uint8(offset)
    last = (b & (1 << bits)) == 0
    number = np.concatenate([[0], np.cumsum(last)[:-1]]).astype(np.int64)  # which number each byte belongs to
    first = np.concatenate([[True], last[:-1]])
    pos = np.arange(b.size) - np.maximum.accumulate(np.where(first, np.arange(b.size), 0))
    out = np.zeros(int(last.sum()), dtype=np.int64)
    np.add.at(out, number, (b & ((1 << bits) - 1)).astype(np.int64) << (bits * pos))
    return out


def varint_encode(idx: np.ndarray) -> bytes:
    """The gaps ``idx_j − idx_{j−1}`` (``idx_{−1} = −1``, so each is at least 1) as LEB128 varints: 7 bits a byte,
    least significant group first, the high bit set on every byte but a number's last."""
    return _groups_encode(np.diff(np.asarray(idx, dtype=np.int64), prepend=-1), 7, 0)


def varint_decode(data: bytes | memoryview) -> np.ndarray:
    """The indices :func:`varint_encode` wrote (int64, ascending)."""
    return np.cumsum(_groups_decode(data, 7, 0)) - 1


def polyline_encode(vector: np.ndarray, precision: int) -> bytes:
    """Google's Encoded Polyline Algorithm on a vector: each value times ``10**precision``, rounded (to nearest,
    ties to even); the difference from the previous rounded value, zig-zagged (left-shifted, inverted if
    negative); 5-bit groups from the least significant, ``0x20`` on each group that has a successor, plus 63:
    one ASCII byte a group."""
    q = np.rint(np.asarray(vector, dtype=np.float64) * 10.0 ** precision).astype(np.int64)
    d = np.diff(q, prepend=0)
    zz = np.where(d < 0, ~(d << 1), d << 1)
    return _groups_encode(zz, 5, 63)


def polyline_decode(message: bytes, elements: int, precision: int) -> np.ndarray:
    """The rounded values back (float32)."""
    zz = _groups_decode(message, 5, 63)[:int(elements)]
    d = np.where(zz & 1, ~(zz >> 1), zz >> 1)
    return (np.cumsum(d).astype(np.float64) / 10.0 ** precision).astype(np.float32)


def top_indices(p: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` indices of the largest ``|p|``, ascending (ties: numpy's selection, the same on every run)."""
    a = np.abs(np.asarray(p, dtype=np.float32))
    if k >= a.size:
        return np.arange(a.size, dtype=np.int64)
    return np.sort(np.argpartition(-a, k - 1)[:k])


def _values(p: np.ndarray, idx: np.ndarray, value_bytes: int) -> np.ndarray:
    return np.asarray(p, dtype=np.float32)[idx].astype(np.float16 if value_bytes == 2 else np.float32)


def sparse_encode(p: np.ndarray, idx: np.ndarray, scheme: str, value_bytes: int, exact: bool = False) -> bytes:
    """The tag, the indices ``idx`` (ascending) and ``p[idx]``; ``exact``: the indices in the smallest of the
    fixed scheme and the varint gaps, measured on ``idx`` (a length that depends on the values)."""
    m = int(np.asarray(p).size)
    tag = index_scheme(m, idx.size, scheme)
    if exact:
        gaps = varint_encode(idx)
        fixed = math.ceil(m / 8) if tag == _BITMAP else 4 * idx.size
        if len(gaps) < fixed:
            return bytes([_VARINT]) + gaps + _values(p, idx, value_bytes).tobytes()
    if tag == _BITMAP:
        mask = np.zeros(m, dtype=bool)
        mask[idx] = True
        where = np.packbits(mask, bitorder="little").tobytes()
    else:
        where = idx.astype("<u4").tobytes()
    return bytes([tag]) + where + _values(p, idx, value_bytes).tobytes()


def sparse_decode(message: bytes, elements: int, k: int, value_bytes: int) -> np.ndarray:
    """The dense float32 vector: the sent values at their indices, zero elsewhere."""
    m = int(elements)
    tag = message[0]
    if tag == _BITMAP:
        n = math.ceil(m / 8)
        mask = np.unpackbits(np.frombuffer(message, dtype=np.uint8, offset=1, count=n), bitorder="little", count=m)
        idx, off = np.flatnonzero(mask), 1 + n
    elif tag == _VARINT:  # the values take the message's last k·value_bytes bytes
        off = len(message) - k * value_bytes
        idx = varint_decode(memoryview(message)[1:off])
    else:
        idx, off = np.frombuffer(message, dtype="<u4", offset=1, count=k).astype(np.int64), 1 + 4 * k
    dtype = np.float16 if value_bytes == 2 else np.float32
    out = np.zeros(m, dtype=np.float32)
    out[idx] = np.frombuffer(message, dtype=dtype, offset=off, count=idx.size).astype(np.float32)
    return out


def randk_bytes(k: int, value_bytes: int) -> int:
    """``8 + k·value_bytes``: the shared seed and the values."""
    return 8 + int(k) * value_bytes


def randk_indices(seed: int, elements: int, k: int) -> np.ndarray:
    """The ``k`` distinct indices of ``m`` a seed draws (ascending): sender and receiver draw the same."""
    return np.sort(np.random.default_rng(int(seed)).choice(int(elements), size=int(k), replace=False))


def randk_encode(p: np.ndarray, k: int, value_bytes: int, scale: float, rng: np.random.Generator) -> bytes:
    """A fresh seed (8 bytes), then ``scale · p`` at the ``k`` indices it draws."""
    seed = int(rng.integers(2**63 - 1))
    idx = randk_indices(seed, np.asarray(p).size, k)
    vals = (np.asarray(p, dtype=np.float32)[idx] * np.float32(scale))
    dtype = np.float16 if value_bytes == 2 else np.float32
    return np.array([seed], dtype="<u8").tobytes() + vals.astype(dtype).tobytes()


def randk_decode(message: bytes, elements: int, k: int, value_bytes: int) -> np.ndarray:
    """The values at the seed's indices, zero elsewhere (float32)."""
    seed = int(np.frombuffer(message, dtype="<u8", count=1)[0])
    idx = randk_indices(seed, elements, k)
    out = np.zeros(int(elements), dtype=np.float32)
    dtype = np.float16 if value_bytes == 2 else np.float32
    out[idx] = np.frombuffer(message, dtype=dtype, offset=8, count=k).astype(np.float32)
    return out
