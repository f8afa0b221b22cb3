#!/usr/bin/python3
# scripts/make_photo_folder.py — makes an ImageNet-like folder tree of JPEG
# photos from the wallpapers Debian installs, for testing and timing im2rec
# and the record loader (scripts/bench_loader.sh) without ImageNet.
#
#   /usr/bin/python3 scripts/make_photo_folder.py OUT_DIR [--images N] [--classes K] [--seed S]
#
# Sources: every JPEG/PNG under /usr/share/wallpapers and
# /usr/share/backgrounds (searched recursively; SVGs, screenshots/previews
# and images under 480 pixels on a side are skipped). Each output image is a
# random crop of a random source — random scale (10-100 % of the largest
# crop of that shape), random position, landscape 500x375 or (1 in 4)
# portrait 375x500, ImageNet's typical sizes — resized with Lanczos and
# saved as JPEG quality 90 to OUT_DIR/classNN/imgNNNNN.jpg; image i belongs to
# class i % K. Everything is drawn from random.Random(seed), so a seed gives
# the same files. Needs Pillow (Debian's python3-pil). Prints what it made.
import argparse
import os
import random
import sys

from PIL import Image

SOURCE_DIRS = ["/usr/share/wallpapers", "/usr/share/backgrounds"]
MIN_SIDE = 480
LANDSCAPE, PORTRAIT = (500, 375), (375, 500)
WORKING_LONG_SIDE = 2048  # large sources are reduced to about this first (speed)


def find_sources():
    found = []
    for root in SOURCE_DIRS:
        for path, dirs, files in os.walk(root, followlinks=True):
            dirs.sort()
            for name in sorted(files):
                low = name.lower()
                if not low.endswith((".jpg", ".jpeg", ".png")) or "screenshot" in low or "preview" in low:
                    continue
                full = os.path.join(path, name)
                try:
                    with Image.open(full) as im:
                        if min(im.size) < MIN_SIDE:
                            continue
                except OSError:
                    continue
                found.append(full)
    return found


def load_source(path):
    im = Image.open(path)
    im.draft("RGB", (WORKING_LONG_SIDE, WORKING_LONG_SIDE))  # JPEG: decode at a reduced scale
    im = im.convert("RGB")
    factor = max(im.size) // WORKING_LONG_SIDE
    if factor >= 2:
        im = im.reduce(factor)
    return im


def crop_box(rng, size, out_size):
    """A random box of out_size's aspect ratio inside an image of `size`."""
    w, h = size
    aspect = out_size[0] / out_size[1]
    max_w = min(w, h * aspect)
    scale = rng.uniform(0.1, 1.0) ** 0.5  # area fraction uniform in [0.1, 1]
    cw = max(out_size[0] // 4, int(max_w * scale))
    ch = max(out_size[1] // 4, int(cw / aspect))
    cw, ch = min(cw, w), min(ch, h)
    x = rng.randrange(0, w - cw + 1)
    y = rng.randrange(0, h - ch + 1)
    return (x, y, x + cw, y + ch)


def main():
    ap = argparse.ArgumentParser(description="Make an ImageNet-like folder of JPEG crops of the installed wallpapers.")
    ap.add_argument("out_dir")
    ap.add_argument("--images", type=int, default=2000, help="number of images (default 2000)")
    ap.add_argument("--classes", type=int, default=10, help="number of class folders (default 10)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = ap.parse_args()
    if args.images < 1 or args.classes < 1:
        sys.exit("make_photo_folder: --images and --classes must be positive")
    sources = find_sources()
    if not sources:
        sys.exit("make_photo_folder: no JPEG/PNG of at least %d pixels a side under %s"
                 % (MIN_SIDE, " or ".join(SOURCE_DIRS)))
    rng = random.Random(args.seed)
    # Plan every image first (source, shape, and a seed for its crop), then
    # load each source once and cut all its crops.
    plan = []
    for i in range(args.images):
        shape = PORTRAIT if rng.random() < 0.25 else LANDSCAPE
        plan.append((i, rng.randrange(len(sources)), shape, rng.getrandbits(64)))
    for c in range(args.classes):
        os.makedirs(os.path.join(args.out_dir, "class%02d" % c), exist_ok=True)
    total_bytes = 0
    portrait = 0
    by_source = {}
    for entry in plan:
        by_source.setdefault(entry[1], []).append(entry)
    for s in sorted(by_source):
        im = load_source(sources[s])
        for i, _, shape, crop_seed in by_source[s]:
            crop_rng = random.Random(crop_seed)
            box = crop_box(crop_rng, im.size, shape)
            out = im.resize(shape, Image.LANCZOS, box=box)
            path = os.path.join(args.out_dir, "class%02d" % (i % args.classes), "img%05d.jpg" % i)
            out.save(path, "JPEG", quality=90)
            total_bytes += os.path.getsize(path)
            portrait += shape == PORTRAIT
        im.close()
    print("made %d JPEGs (%d portrait 375x500, %d landscape 500x375) in %d classes under %s from %d source images: "
          "%.1f MB, %.1f KB per image"
          % (args.images, portrait, args.images - portrait, args.classes, args.out_dir, len(sources),
             total_bytes / 1e6, total_bytes / 1e3 / args.images))


if __name__ == "__main__":
    main()
