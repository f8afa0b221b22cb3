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
#   multi.rec        MXRecordIO (no .idx), recordio.pack with 3-value label arrays
#   <name>.expected  what mx.io.ImageRecordIter (no augmentation, file order)
#                    yields per record: a line "labels v1 v2 ..." then a line
#                    "pixels" followed by H*W*3 bytes of RGB, row-major
import os
import sys

import cv2
import mxnet as mx
import numpy as np

H, W, N = 24, 32, 6


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
        header = mx.recordio.IRHeader(0, np.array([i, 0.5 * i, -1.25], dtype=np.float32), 100 + i, 0)
        rec.write(mx.recordio.pack(header, png.tobytes()))
    rec.close()
    expected(out_dir, "multi", 3)


if __name__ == "__main__":
    main()
