#!/usr/bin/env python3
# scripts/make_photo_classes.py — makes a small, learnable image-classification
# folder from the real photographs that scikit-image and scikit-learn ship, to
# measure what train_resnet's default recipe does on "a folder of my own photos"
# (a few classes, tens to hundreds of images each) without any download.
#
#   python3 -m venv /tmp/photoenv && /tmp/photoenv/bin/pip install scikit-image scikit-learn pillow
#   /tmp/photoenv/bin/python scripts/make_photo_classes.py OUT_DIR --classes 4 --images 60 --size 64 --seed 1
#   build/im2rec --resize 0 OUT_DIR/train OUT_DIR/train && build/im2rec OUT_DIR/val OUT_DIR/val
#   build/train_resnet --data-train OUT_DIR/train.erec --data-val OUT_DIR/val.erec
#
# A class is one source photograph, or a family of them (the two motorcycle
# views of the stereo pair); the pool is listed in SOURCES (colour photos
# first, then grey ones, which are written as RGB). The seed shuffles the
# pool and the first --classes sources not named by --exclude become
# class folders named after them (so two folders made with different
# --exclude lists share no source). Each image is a random square crop of
# its class's source: side 35-100 % of the source's short side, random
# position, a horizontal flip half the time, brightness, contrast and
# saturation each scaled by 0.8-1.2, a small hue-free colour cast (each
# channel x 0.93-1.07), resized to --size x --size with Lanczos and saved
# as JPEG quality 92. Training and validation crops come from different
# positions: the source is cut into a 6 x 6 checkerboard and a training
# crop's centre lies on a white cell, a validation crop's on a black one.
# --images per class are split --val-fraction (default 0.2) into
# OUT_DIR/val/<class>/ and the rest into OUT_DIR/train/<class>/.
# Everything is drawn from random.Random(seed): a seed gives the same files.
# Only for measurements: nothing in ember needs this script.
import argparse
import os
import random
import sys

import numpy as np
from PIL import Image, ImageEnhance

GRID = 6  # checkerboard cells per side: train and validation crop centres alternate


def _skimage(name):
    def load():
        import skimage.data
        return getattr(skimage.data, name)()
    return load


def _sklearn(name):
    def load():
        from sklearn.datasets import load_sample_image
        return load_sample_image(name)
    return load


# name -> loaders of its photo(s) as uint8 arrays (H, W[, 3])
SOURCES = {
    "astronaut": [_skimage("astronaut")],
    "chelsea": [_skimage("chelsea")],
    "coffee": [_skimage("coffee")],
    "rocket": [_skimage("rocket")],
    "hubble": [_skimage("hubble_deep_field")],
    "retina": [_skimage("retina")],
    "ihc": [_skimage("immunohistochemistry")],
    "motorcycle": [lambda: _stereo(0), lambda: _stereo(1)],
    "china": [_sklearn("china.jpg")],
    "flower": [_sklearn("flower.jpg")],
    "camera": [_skimage("camera")],
    "moon": [_skimage("moon")],
    "coins": [_skimage("coins")],
    "clock": [_skimage("clock")],
    "grass": [_skimage("grass")],
    "gravel": [_skimage("gravel")],
    "brick": [_skimage("brick")],
    "cell": [_skimage("cell")],
}


def _stereo(i):
    import skimage.data
    return skimage.data.stereo_motorcycle()[i]


def to_rgb(a):
    a = np.asarray(a)
    if a.dtype != np.uint8:
        a = (np.clip(a, 0, 1) * 255).astype(np.uint8) if a.max() <= 1 else np.clip(a, 0, 255).astype(np.uint8)
    if a.ndim == 2:
        a = np.stack([a] * 3, axis=-1)
    return Image.fromarray(a[..., :3]).convert("RGB")


def crop_center(rng, size, split):
    """A crop box whose centre lies on a `split` cell (0 train, 1 val) of the checkerboard."""
    w, h = size
    short = min(w, h)
    side = int(short * rng.uniform(0.35, 1.0))
    while True:
        cx = rng.uniform(side / 2, w - side / 2)
        cy = rng.uniform(side / 2, h - side / 2)
        cell = (int(cx * GRID / w) + int(cy * GRID / h)) % 2
        # A full-size crop has one possible centre: allow it for both splits.
        if cell == split or side >= short - 1:
            break
        if rng.random() < 0.02:  # this side leaves no centre on a cell of that colour: try another side
            side = int(short * rng.uniform(0.35, 1.0))
    x0, y0 = int(round(cx - side / 2)), int(round(cy - side / 2))
    x0, y0 = min(max(x0, 0), w - side), min(max(y0, 0), h - side)
    return (x0, y0, x0 + side, y0 + side)


def make_image(rng, photos, split, size):
    src = photos[rng.randrange(len(photos))]
    out = src.resize((size, size), Image.LANCZOS, box=crop_center(rng, src.size, split))
    if rng.random() < 0.5:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    out = ImageEnhance.Brightness(out).enhance(rng.uniform(0.8, 1.2))
    out = ImageEnhance.Contrast(out).enhance(rng.uniform(0.8, 1.2))
    out = ImageEnhance.Color(out).enhance(rng.uniform(0.8, 1.2))
    cast = np.array([rng.uniform(0.93, 1.07) for _ in range(3)], dtype=np.float32)
    a = np.clip(np.asarray(out, dtype=np.float32) * cast, 0, 255).astype(np.uint8)
    return Image.fromarray(a)


def main():
    ap = argparse.ArgumentParser(description="Make a small photo classification folder (train/ and val/) from the "
                                             "photographs scikit-image and scikit-learn ship.")
    ap.add_argument("out_dir")
    ap.add_argument("--classes", type=int, default=4, help="number of classes (at most %d; default 4)" % len(SOURCES))
    ap.add_argument("--images", type=int, default=60, help="images per class, train + val (default 60)")
    ap.add_argument("--size", type=int, default=64, help="side of the square images in pixels (default 64)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--val-fraction", type=float, default=0.2, help="share of each class in val/ (default 0.2)")
    ap.add_argument("--exclude", default="", help="comma list of source names not to use (e.g. the tuning folder's)")
    args = ap.parse_args()
    excluded = set(filter(None, args.exclude.split(",")))
    unknown = excluded - set(SOURCES)
    if unknown:
        sys.exit("make_photo_classes: unknown --exclude names %s (known: %s)" % (sorted(unknown), ", ".join(SOURCES)))
    pool = [n for n in SOURCES if n not in excluded]
    if not 1 <= args.classes <= len(pool) or args.images < 2 or args.size < 8 or not 0 < args.val_fraction < 1:
        sys.exit("make_photo_classes: need 1 <= --classes <= %d (sources left), --images >= 2, --size >= 8, "
                 "0 < --val-fraction < 1" % len(pool))
    rng = random.Random(args.seed)
    rng.shuffle(pool)
    chosen = sorted(pool[:args.classes])
    n_val = max(1, int(round(args.images * args.val_fraction)))
    for name in chosen:
        photos = [to_rgb(load()) for load in SOURCES[name]]
        class_rng = random.Random("%d/%s" % (args.seed, name))
        for split, folder, count in ((0, "train", args.images - n_val), (1, "val", n_val)):
            d = os.path.join(args.out_dir, folder, name)
            os.makedirs(d, exist_ok=True)
            for i in range(count):
                make_image(class_rng, photos, split, args.size).save(os.path.join(d, "%04d.jpg" % i), "JPEG",
                                                                     quality=92)
    print("made %d classes (%s) x %d images (%d train, %d val) of %dx%d under %s"
          % (len(chosen), ",".join(chosen), args.images, args.images - n_val, n_val, args.size, args.size,
             args.out_dir))


if __name__ == "__main__":
    main()
