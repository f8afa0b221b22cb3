#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors parser (net/safetensors.cpp) for
fuzzing: small valid files covering what pretrained files hold (F32, F16, BF16, I64
scalars, metadata, a "module." prefix, an empty tensor) and a few near-misses
(unknown dtype, overlapping offsets, a header that lies about its length, a
truncated tensor) that the parser must refuse with one line.
usage: python3 tests/fuzz/seeds/make_safetensors_seeds.py   (writes next to itself)
"""
import json, os, struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors")

def build(entries, metadata=None, header_len_delta=0, cut=0):
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data, offsets in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": offsets or [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    out = struct.pack("<Q", len(text) + header_len_delta) + text + b"".join(blobs)
    return out[:len(out) - cut] if cut else out

f32 = lambda *v: struct.pack("<%df" % len(v), *v)
f16 = lambda *v: struct.pack("<%de" % len(v), *v)
i64 = lambda *v: struct.pack("<%dq" % len(v), *v)
seeds = {
    "conv_bn.safetensors": build([
        ("conv1.weight", "F32", [2, 1, 1, 1], f32(0.5, -1.0), None),
        ("bn1.weight", "F32", [2], f32(1.0, 1.0), None),
        ("bn1.running_var", "F32", [2], f32(1.0, 2.0), None),
        ("bn1.num_batches_tracked", "I64", [], i64(7), None)], {"format": "pt", "num_layers": "18"}),
    "half_module.safetensors": build([
        ("module.fc.weight", "F16", [2, 2], f16(1, 2, 3, 4), None),
        ("module.fc.bias", "F16", [2], f16(0, 1), None)]),
    "empty_tensor.safetensors": build([("fc.bias", "F32", [0], b"", None)], {}),
    "bad_dtype.safetensors": build([("fc.weight", "F8_E4M3", [2], b"\0\0", None)]),
    "bf16.safetensors": build([("fc.weight", "BF16", [2], struct.pack("<2H", 0x3f80, 0xc040), None)]),
    "overlap.safetensors": build([("a", "F32", [1], f32(1), [0, 4]), ("b", "F32", [1], f32(2), [0, 4])]),
    "header_lies.safetensors": build([("a", "F32", [2], f32(1, 2), None)], header_len_delta=64),
    "truncated.safetensors": build([("a", "F32", [4], f32(1, 2, 3, 4), None)], cut=6),
}
os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
print("wrote %d seeds to %s" % (len(seeds), OUT))
