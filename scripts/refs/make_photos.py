# scripts/refs/make_photos.py — a folder of photo-like JPEGs for the loader
# benchmarks of scripts/bench_vs_refs.sh, where no photo collection is at hand
# (scripts/make_photo_folder.py crops Debian's wallpapers, which a machine may
# not have). Run with the reference environment's Python (make refs: OpenCV):
#
#   .refs/mxnet/bin/python scripts/refs/make_photos.py OUT_DIR [--images N] [--classes K] [--seed S]
#
# Writes OUT_DIR/classNN/imgNNNNN.jpg: image i in class i % K, 500x375
# (1 in 4: 375x500 portrait), JPEG quality 90, 4:2:0 — ImageNet's typical
# sizes and encoding. Each is a scene with the statistics that matter to a
# decoder and a resampler: smooth light gradients, a horizon, filled shapes
# with anti-aliased edges, fine texture and sensor noise, drawn from
# numpy.random.RandomState(seed + i), so a seed gives the same files.
import argparse
import os

import cv2
import numpy as np


def scene(rs, width, height):
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    horizon = height * rs.uniform(0.35, 0.7) + rs.uniform(5, 25) * np.sin(x / rs.uniform(20, 80))
    sky = y < horizon
    top, bottom = rs.uniform(40, 240, 3), rs.uniform(20, 200, 3)
    img = np.empty((height, width, 3), np.float32)
    for c in range(3):
        img[..., c] = np.where(sky, top[c] + 30 * y / height, bottom[c] - 40 * (y - horizon) / height)
    img = np.ascontiguousarray(np.clip(img, 0, 255).astype(np.uint8))
    for _ in range(rs.randint(4, 12)):
        colour = tuple(int(v) for v in rs.randint(0, 256, 3))
        cx, cy = int(rs.randint(0, width)), int(rs.randint(0, height))
        if rs.rand() < 0.5:
            cv2.circle(img, (cx, cy), int(rs.randint(5, 80)), colour, -1, cv2.LINE_AA)
        else:
            w, h = int(rs.randint(10, 150)), int(rs.randint(10, 150))
            cv2.rectangle(img, (cx, cy), (cx + w, cy + h), colour, -1)
    texture = rs.normal(0, 1, (height // 4 + 1, width // 4 + 1, 3)).astype(np.float32)
    texture = cv2.resize(texture, (width, height), interpolation=cv2.INTER_LINEAR)
    img = cv2.GaussianBlur(img, (0, 0), rs.uniform(0.6, 1.5)).astype(np.float32)
    img += 10 * texture + rs.normal(0, 4, img.shape).astype(np.float32)
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def main():
    p = argparse.ArgumentParser(description="A folder of photo-like JPEGs (scripts/refs/make_photos.py).")
    p.add_argument("out_dir")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.images < 1 or a.classes < 1:
        p.error("--images and --classes must be positive")
    for i in range(a.images):
        rs = np.random.RandomState(a.seed * 1000003 + i)
        width, height = (375, 500) if rs.rand() < 0.25 else (500, 375)
        folder = os.path.join(a.out_dir, "class%02d" % (i % a.classes))
        os.makedirs(folder, exist_ok=True)
        # cv2 writes BGR; the channel order of a random scene does not matter.
        ok = cv2.imwrite(os.path.join(folder, "img%05d.jpg" % i), scene(rs, width, height),
                         [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                          cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420])
        if not ok:
            raise SystemExit("make_photos.py: cannot write into %s" % folder)
    print("make_photos.py: %d JPEGs in %d class folders under %s" % (a.images, a.classes, a.out_dir))


if __name__ == "__main__":
    main()
