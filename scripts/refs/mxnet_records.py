# scripts/refs/mxnet_records.py — record files written by MXNet 1.9.1 itself,
# and what MXNet reads back from them, for ember's interop test
# (tests/data/test_mxnet_interop.cpp). Run with the reference environment's
# Python (make refs: .refs/mxnet/bin/python):
#
#   python scripts/refs/mxnet_records.py OUT_DIR
#
# writes, in OUT_DIR, from 6 random 24x32 images:
#   png.rec/.idx     MXIndexedRecordIO + recordio.pack_img (PNG), a float label each
#   jpeg.rec/.idx    the same as JPEG (quality 90)
#   multi.rec        MXRecordIO (no .idx), recordio.pack with 3-value label arrays;
#                    record 2's labels hold the RecordIO magic, so MXNet writes
#                    that record split in parts (checked here)
#   im2rec_0.rec/.idx, im2rec_1.rec/.idx
#                    MXNet's own tools/im2rec.py run on a folder of photo-like
#                    JPEGs and PNGs in 3 class folders (--list --recursive
#                    --chunks 2, then the packing with its defaults: shuffled
#                    list, re-encoded as JPEG quality 95)
#   <name>.expected  what mx.io.ImageRecordIter (no augmentation, file order)
#                    yields per record: a line "labels v1 v2 ..." then a line
#                    "pixels" followed by H*W*3 bytes of RGB, row-major
import os
import struct
import subprocess
import sys

import cv2
import mxnet as mx
import numpy as np

H, W, N = 24, 32, 6
MAGIC = 0xced7230a


def expected(out_dir, name, label_width):
    it = mx.io.ImageRecordIter(path_imgrec=os.path.join(out_dir, name + ".rec"), data_shape=(3, H, W), batch_size=1,
                               shuffle=False, label_width=label_width, round_batch=False, preprocess_threads=1,
                               prefetch_buffer=1)
    with open(os.path.join(out_dir, name + ".expected"), "wb") as f:
        for batch in it:
            labels = batch.label[0].asnumpy().reshape(-1)
            pixels = batch.data[0].asnumpy()[0].transpose(1, 2, 0)  # [3, H, W] -> [H, W, 3], RGB
            f.write(("labels " + " ".join(repr(float(v)) for v in labels) + "\n").encode())
            f.write(b"pixels\n")
            f.write(np.clip(np.rint(pixels), 0, 255).astype(np.uint8).tobytes())


def split_parts(path):
    """The number of RecordIO parts with cflag != 0 (pieces of split records) in a .rec file."""
    data = open(path, "rb").read()
    pos, parts = 0, 0
    while pos < len(data):
        magic, lrec = struct.unpack_from("<II", data, pos)
        assert magic == MAGIC, "%s: bad magic at %d" % (path, pos)
        length = lrec & ((1 << 29) - 1)
        parts += (lrec >> 29) != 0
        pos += 8 + ((length + 3) & ~3)
    return parts


def photo_folder(root, rng):
    """3 class folders of 24x32 photo-like images (smooth light, a disc, sensor noise), JPEG and PNG."""
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float64)
    for c, name in enumerate(("birds", "cars", "trees")):
        os.makedirs(os.path.join(root, name))
        for i in range(3 + c):
            light = 60 + 120 * (xx / W) * (0.5 + 0.5 * np.sin(yy / 5.0 + i))
            disc = ((xx - rng.uniform(5, W - 5)) ** 2 + (yy - rng.uniform(5, H - 5)) ** 2) < rng.uniform(9, 40)
            img = np.stack([light + 40 * c, light * 0.8 + 30 * i, 200 - light * 0.5], axis=2)
            img[disc] = rng.randint(0, 256, size=3)
            img = np.clip(img + rng.normal(0, 4, img.shape), 0, 255).astype(np.uint8)
            ext = ".png" if i % 3 == 1 else ".jpg"
            assert cv2.imwrite(os.path.join(root, name, "img%d%s" % (i, ext)), img)


def run_im2rec(out_dir, rng):
    tool = os.path.join(os.path.dirname(mx.__file__), "tools", "im2rec.py")
    root = os.path.join(out_dir, "photos")
    photo_folder(root, rng)
    prefix = os.path.join(out_dir, "im2rec")
    for args in (["--list", "--recursive", "--chunks", "2"], ["--num-thread", "1"]):
        subprocess.run([sys.executable, tool] + args + [prefix, root], check=True, stdout=subprocess.DEVNULL)
    for part in ("im2rec_0", "im2rec_1"):
        assert os.path.exists(os.path.join(out_dir, part + ".idx")), part
        expected(out_dir, part, 1)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.RandomState(5)
    # Smooth images (JPEG keeps them close) with some noise; cv2's channel order is BGR.
    yy, xx = np.mgrid[0:H, 0:W]
    images = []
    for i in range(N):
        base = np.stack([(xx * 7 + i * 20) % 256, (yy * 9 + i * 35) % 256, ((xx + yy) * 4 + i * 50) % 256], axis=2)
        images.append(np.clip(base + rng.randint(-8, 9, size=base.shape), 0, 255).astype(np.uint8))
    for name, fmt, quality in (("png", ".png", 3), ("jpeg", ".jpg", 90)):
        rec = mx.recordio.MXIndexedRecordIO(os.path.join(out_dir, name + ".idx"), os.path.join(out_dir, name + ".rec"),
                                            "w")
        for i, img in enumerate(images):
            header = mx.recordio.IRHeader(0, float(i % 4), i, 0)
            rec.write_idx(i, mx.recordio.pack_img(header, img, quality=quality, img_fmt=fmt))
        rec.close()
        expected(out_dir, name, 1)
    rec = mx.recordio.MXRecordIO(os.path.join(out_dir, "multi.rec"), "w")
    for i, img in enumerate(images):
        ok, png = cv2.imencode(".png", img)
        assert ok
        labels = np.array([i, 0.5 * i, -1.25], dtype=np.float32)
        if i == 2:  # the magic at payload offset 28 (4-aligned): dmlc-core splits the record there
            labels[1] = np.frombuffer(struct.pack("<I", MAGIC), dtype=np.float32)[0]
        header = mx.recordio.IRHeader(0, labels, 100 + i, 0)
        rec.write(mx.recordio.pack(header, png.tobytes()))
    rec.close()
    assert split_parts(os.path.join(out_dir, "multi.rec")) == 2, "MXNet did not split the record holding the magic"
    expected(out_dir, "multi", 3)
    run_im2rec(out_dir, rng)


if __name__ == "__main__":
    main()
