#!/usr/bin/env python3
"""safetensors files from PyTorch without the `safetensors` pip package (Debian
has none; machines without a network cannot pip install): the same format, in
the standard library plus torch. Where `safetensors` is installed,
`safetensors.torch.save_file` / `load_file` do the same.

    import sys; sys.path.insert(0, "scripts")       # from the ember checkout
    from torch_safetensors import save_file, load_file
    save_file(model.state_dict(), "resnet50.safetensors")
    model.load_state_dict(load_file("ck/ft-0005.safetensors"), strict=True)

Layout: u64 little-endian header length, the JSON header {name: {dtype, shape,
data_offsets}, "__metadata__": {...}} padded with spaces to 8 bytes, then the
raw little-endian tensor bytes.
"""
import json, struct
import torch

_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}
_TYPES = {v: k for k, v in _NAMES.items()}


def save_file(tensors, path, metadata=None):
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_file(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = torch.frombuffer(bytearray(data[a:b]), dtype=torch.uint8) if b > a else torch.empty(0, dtype=torch.uint8)
        out[name] = raw.view(_TYPES[e["dtype"]]).reshape(e["shape"]).clone()
    return out
