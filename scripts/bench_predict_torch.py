#!/usr/bin/env python3
"""PyTorch's side of scripts/bench_predict.sh: the same photos through what a
PyTorch user runs to classify them (PIL decode, Resize(256), CenterCrop(224),
ToTensor, Normalize, torchvision resnet50 in eval mode under no_grad), timed
as a whole like build/predict (decode + forward), in batches.

usage: /usr/bin/python3 scripts/bench_predict_torch.py MODEL.safetensors BATCH THREADS IMAGE...
Prints "Predicted N images in S s: R img/s", predict's format.
"""
import json, struct, sys, time
import torch, torchvision
import torchvision.transforms as T
from PIL import Image

def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F32": torch.float32, "F16": torch.float16, "I64": torch.int64}
    state = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        state[name] = torch.frombuffer(bytearray(data[a:b]), dtype=kinds[e["dtype"]]).reshape(e["shape"]).clone()
    return state

model_path, batch, threads, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
if threads > 0:
    torch.set_num_threads(threads)
model = torchvision.models.resnet50(weights=None)
model.load_state_dict(load_safetensors(model_path), strict=True)
model.eval()
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
start = time.perf_counter()
with torch.no_grad():
    for i in range(0, len(files), batch):
        x = torch.stack([tf(Image.open(p).convert("RGB")) for p in files[i:i + batch]])
        probs = torch.softmax(model(x), dim=1)
        top = probs.topk(5, dim=1)
seconds = time.perf_counter() - start
print("Predicted %d images in %.3f s: %.2f img/s" % (len(files), seconds, len(files) / seconds))
