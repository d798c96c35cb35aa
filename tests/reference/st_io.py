"""Minimal safetensors reader/writer (Python stdlib + torch; the `safetensors` package is not available here).

Format (https://huggingface.co/docs/safetensors): 8-byte little-endian header length N, N bytes of JSON header
{"<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the raw little-endian tensor bytes (offsets are relative to the end of the header).
"""
import json
import os
import struct

import torch

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def save(path, tensors, metadata=None):
    """Writes {name: tensor} (sorted by name, like the C writer) with optional {str: str} metadata."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in _NAMES:
            raise ValueError(f"{path}: {name}: unsupported dtype {t.dtype}")
        # Raw bytes via a uint8 view (little-endian host assumed, as everywhere in this project).
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError(f"{path}: metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)  # pad so the data starts 8-byte aligned
    tmp = path + ".tmp.write"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load(path):
    """Returns ({name: tensor}, metadata dict). Validates sizes and bounds."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: file too short")
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError(f"{path}: header length {n} exceeds file size")
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    data = buf[8 + n :]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        dt = _DTYPES.get(info["dtype"])
        if dt is None:
            raise ValueError(f"{path}: {name}: unsupported dtype {info['dtype']}")
        b, e = info["data_offsets"]
        shape = list(info["shape"])
        numel = 1
        for s in shape:
            numel *= s
        esize = torch.tensor([], dtype=dt).element_size()
        if not (0 <= b <= e <= len(data)) or e - b != numel * esize:
            raise ValueError(f"{path}: {name}: bad data_offsets {info['data_offsets']}")
        if numel == 0:
            out[name] = torch.zeros(shape, dtype=dt)
        else:
            out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=dt).reshape(shape).clone()
    return out, meta
