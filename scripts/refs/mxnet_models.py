# scripts/refs/mxnet_models.py — ResNet model files with random weights, made
# and saved by MXNet 1.9.1 itself, and MXNet's own outputs on a photo, for
# ember's MXNet model interop test. Run with the reference environment's
# Python (make refs: .refs/mxnet/bin/python):
#
#   python scripts/refs/mxnet_models.py make OUT_DIR [NET...]
#   python scripts/refs/mxnet_models.py check KIND PARAMS NUM_CLASSES NUM_LAYERS PHOTO_PNG [C,H,W [RESIZE]]
#
# make writes, in OUT_DIR (fixed seeds: the same files every run; about 30 s),
# the nets named (default: preact50 preact152 gluon18 gluon50):
#   photo.png            a 500x375 photo-like RGB scene (gradients, shapes, blur, noise)
#   photo_grey.png       the same in one channel (cv2's BGR2GRAY), for one-channel nets
#   preact50-symbol.json, preact50-0000.params
#   preact152-symbol.json, preact152-0000.params
#                        the pre-activation ResNet of MXNet's
#                        example/image-classification/symbols/resnet.py (not in
#                        the pip package: get_symbol below rebuilds it, node
#                        names included) for ImageNet, 1000 classes, saved by
#                        mx.model.save_checkpoint (names arg:... / aux:...)
#   gluon18.params, gluon50.params
#                        mx.gluon.model_zoo.vision.resnet18_v1 / resnet50_v1,
#                        1000 classes, saved by net.save_parameters (names
#                        features.0.weight, ..., output.bias)
#   preact20-symbol.json, preact20-0000.params (only when named)
#                        resnet.py's CIFAR-style ResNet-20 for one-channel
#                        28x28 input (Fashion-MNIST), 10 classes: a small
#                        MXNet checkpoint to fine-tune
#   reference.json       {"preact50": {"probs": [1000 floats], "top5": [5 ints],
#                        "input": "...", "dtype": "float64", "float32_max_abs_diff":
#                        MXNet's own float32 forward's max |dp| from them}, "preact152": ...,
#                        "gluon18": ..., "gluon50": ...}: MXNet's softmax of
#                        each saved file, eval mode, on photo.png (photo_grey.png)
#                        preprocessed as build/predict does at the net's size
#                        (tests/fixtures/ember_crop.py: 224 from 256, 28 from 32),
#                        then normalised as the net was trained (INPUT below);
#                        float64 where MXNet computes it, else float32 (dtype)
# Weights: MXNet's Xavier initializer (train_imagenet.py's: gaussian, fan-in,
# magnitude 2); every batch norm's gamma U(0.5, 1.5) and beta N(0, 0.2), bn_data
# included (fix_gamma=True: MXNet ignores its stored gamma, so must a reader);
# conv and fc biases N(0, 0.1); then the moving statistics calibrated (a
# training step with momentum 0 on 8 smooth random images: MXNet's BatchNorm
# updates them in the backward pass) and the fc weight scaled so that the
# photo's logits have std 3.
#
# check loads PARAMS, written by other software, into MXNet (KIND symbolic:
# get_symbol(NUM_CLASSES, NUM_LAYERS) and a prefix-EEEE.params with exactly the
# symbol's arg:/aux: names; KIND checkpoint: mx.model.load_checkpoint of
# PARAMS = prefix-EEEE.params and its prefix-symbol.json, as fine-tune.py
# loads a model; KIND gluon: resnet{NUM_LAYERS}_v1 and a strict
# load_parameters) for input C,H,W (default 3,224,224; RESIZE, the short side
# before the centre crop, default 256, or 32 for 28) and prints one JSON line
# {"probs": [...], "dtype": ...}: MXNet's softmax on PHOTO_PNG as above. MXNet's
# log goes to stderr.
import json
import os
import sys
import time

import cv2
import mxnet as mx
import numpy as np
from mxnet import autograd
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures"))
from ember_crop import ember_validation_crop  # noqa: E402  (build/predict's preprocessing)

IMAGENET, FASHION = (3, 224, 224), (1, 28, 28)
RESIZE = {224: 256, 28: 32}  # build/predict's short side before the centre crop (data::validation_resize)
# name, kind, layers, seed, input shape, classes; the seeds of the ImageNet nets
# picked so that the photo's top 6 logits lie >= 0.09 apart
NETS = (("preact50", "symbolic", 50, 50, IMAGENET, 1000), ("preact152", "symbolic", 152, 156, IMAGENET, 1000),
        ("gluon18", "gluon", 18, 22, IMAGENET, 1000), ("gluon50", "gluon", 50, 1054, IMAGENET, 1000),
        ("preact20", "symbolic", 20, 20, FASHION, 10))
DEFAULT_NETS = ("preact50", "preact152", "gluon18", "gluon50")
SYMBOLIC_MEAN = np.array([123.68, 116.779, 103.939])  # train_imagenet.py's rgb-mean, 0-255, std 1
GLUON_MEAN, GLUON_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
INPUT = {
    "symbolic": "ember_validation_crop(photo.png, size 224, resize 256): planar RGB [1, 3, 224, 224]; "
                "x - [123.68, 116.779, 103.939] (0-255 units, std 1)",
    "gluon": "ember_validation_crop(photo.png, size 224, resize 256): planar RGB [1, 3, 224, 224]; "
             "(x / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]",
    "grey": "ember_validation_crop(photo_grey.png, size 28, resize 32): [1, 1, 28, 28]; x (0-255 units, "
            "no mean, std 1: train_mnist's raw pixels)",
}
XAVIER = dict(rnd_type="gaussian", factor_type="in", magnitude=2)
LOGIT_STD = 3.0
CALIBRATION_IMAGES, CALIBRATION_SEED = 8, 1


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# ---- the photo and the input

def photo(width=500, height=375, seed=7):
    """A photo-like RGB scene, HxWx3 u8: sky and hills as gradients, the sun, a lake,
    a barn, a tree, scattered flowers; Gaussian blur (soft edges), pixel noise."""
    rs = np.random.RandomState(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    horizon = 0.57 * height + 14 * np.sin(x / 53.0) + 5 * np.sin(x / 17.0)
    sky, t = y < horizon, y / height
    img = np.zeros((height, width, 3))
    img[..., 0] = np.where(sky, 100 + 95 * t, 65 + 15 * np.sin(x / 29.0) + 25 * t)
    img[..., 1] = np.where(sky, 150 + 70 * t, 125 - 45 * (y - horizon) / height)
    img[..., 2] = np.where(sky, 235 - 45 * t, 45 + 15 * t)
    img = np.ascontiguousarray(np.clip(img, 0, 255).astype(np.uint8))  # drawn in RGB order below
    cv2.circle(img, (405, 68), 34, (250, 228, 150), -1, cv2.LINE_AA)
    cv2.ellipse(img, (370, 305), (105, 28), 0, 0, 360, (70, 110, 165), -1, cv2.LINE_AA)
    cv2.rectangle(img, (70, 168), (208, 300), (158, 52, 36), -1)
    cv2.rectangle(img, (70, 168), (208, 300), (45, 20, 10), 3)
    cv2.fillPoly(img, [np.array([[58, 170], [139, 102], [220, 170]], np.int32)], (92, 32, 28), cv2.LINE_AA)
    cv2.rectangle(img, (120, 232), (158, 300), (66, 42, 22), -1)
    cv2.rectangle(img, (86, 188), (110, 212), (205, 222, 242), -1)
    cv2.rectangle(img, (284, 228), (297, 312), (84, 54, 30), -1)
    cv2.circle(img, (290, 204), 42, (34, 112, 44), -1, cv2.LINE_AA)
    for _ in range(40):
        cx, cy, r = rs.randint(0, width), rs.randint(int(0.64 * height), height), rs.randint(3, 9)
        cv2.circle(img, (int(cx), int(cy)), int(r), tuple(int(v) for v in rs.randint(0, 256, 3)), -1, cv2.LINE_AA)
    img = cv2.GaussianBlur(img, (0, 0), 1.2)
    noisy = img.astype(np.float64) + rs.normal(0, 6, img.shape)
    return np.clip(np.round(noisy), 0, 255).astype(np.uint8)


def read_rgb(path):
    bgr = cv2.imread(path, cv2.IMREAD_COLOR)
    if bgr is None:
        sys.exit("mxnet_models.py: cannot read the image %s" % path)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def read_image(path, channels):
    if channels == 3:
        return read_rgb(path)
    grey = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
    if grey is None:
        sys.exit("mxnet_models.py: cannot read the image %s" % path)
    return grey[:, :, None]


def normalize(kind, planar):
    """[N, C, H, W] in 0-255 units -> the net's input, float64. One channel: raw pixels."""
    x = planar.astype(np.float64)
    if x.shape[1] == 1:
        return x
    if kind == "symbolic":
        return x - SYMBOLIC_MEAN[:, None, None]
    return (x / 255 - GLUON_MEAN[:, None, None]) / GLUON_STD[:, None, None]


def net_input(kind, pixels, shape, resize=None):
    size = shape[1]
    return normalize(kind, ember_validation_crop(pixels, size, resize or RESIZE[size])[None])


def calibration_batch(kind, shape):
    """Smooth random images (4..32 cells of uniform colour upsampled to the input size,
    plus fine noise), normalised for the net; its own generator."""
    channels, size = shape[0], shape[1]
    rs = np.random.RandomState(CALIBRATION_SEED)
    images = []
    for k in range(CALIBRATION_IMAGES):
        cells = min(4 << (k % 4), size)
        small = rs.uniform(0, 255, (cells, cells, channels))
        big = cv2.resize(small, (size, size), interpolation=cv2.INTER_LINEAR).reshape(size, size, channels)
        images.append(np.clip(big + rs.normal(0, 8, big.shape), 0, 255).transpose(2, 0, 1))
    return normalize(kind, np.stack(images))


# ---- the pre-activation ResNet of example/image-classification/symbols/resnet.py

def residual_unit(data, num_filter, stride, dim_match, name, bottle_neck, bn_mom):
    """BN-ReLU-conv pre-activation unit; the projection shortcut (_sc) reads act1."""
    def bn(x, suffix):
        return mx.sym.BatchNorm(data=x, fix_gamma=False, eps=2e-5, momentum=bn_mom, name=name + suffix)

    def relu(x, suffix):
        return mx.sym.Activation(data=x, act_type="relu", name=name + suffix)

    def conv(x, filters, kernel, conv_stride, suffix):
        pad = (kernel // 2, kernel // 2)
        return mx.sym.Convolution(data=x, num_filter=filters, kernel=(kernel, kernel), stride=conv_stride, pad=pad,
                                  no_bias=True, workspace=256, name=name + suffix)

    act1 = relu(bn(data, "_bn1"), "_relu1")
    if bottle_neck:
        mid = int(num_filter * 0.25)
        body = conv(act1, mid, 1, (1, 1), "_conv1")
        body = conv(relu(bn(body, "_bn2"), "_relu2"), mid, 3, stride, "_conv2")
        body = conv(relu(bn(body, "_bn3"), "_relu3"), num_filter, 1, (1, 1), "_conv3")
    else:
        body = conv(act1, num_filter, 3, stride, "_conv1")
        body = conv(relu(bn(body, "_bn2"), "_relu2"), num_filter, 3, (1, 1), "_conv2")
    if dim_match:
        shortcut = data
    else:
        shortcut = mx.sym.Convolution(data=act1, num_filter=num_filter, kernel=(1, 1), stride=stride, no_bias=True,
                                      workspace=256, name=name + "_sc")
    return body + shortcut


def resnet(units, filter_list, num_classes, image_shape, bottle_neck, bn_mom):
    data = mx.sym.identity(data=mx.sym.Variable(name="data"), name="id")  # the float32 build's input node
    data = mx.sym.BatchNorm(data=data, fix_gamma=True, eps=2e-5, momentum=bn_mom, name="bn_data")
    height = image_shape[1]
    if height <= 32:  # CIFAR: 3x3 stem, no pooling
        body = mx.sym.Convolution(data=data, num_filter=filter_list[0], kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                                  no_bias=True, name="conv0", workspace=256)
    else:
        body = mx.sym.Convolution(data=data, num_filter=filter_list[0], kernel=(7, 7), stride=(2, 2), pad=(3, 3),
                                  no_bias=True, name="conv0", workspace=256)
        body = mx.sym.BatchNorm(data=body, fix_gamma=False, eps=2e-5, momentum=bn_mom, name="bn0")
        body = mx.sym.Activation(data=body, act_type="relu", name="relu0")
        body = mx.sym.Pooling(data=body, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")
    for i, count in enumerate(units):
        stride = (1, 1) if i == 0 else (2, 2)
        for j in range(count):
            body = residual_unit(body, filter_list[i + 1], stride if j == 0 else (1, 1), j > 0,
                                 "stage%d_unit%d" % (i + 1, j + 1), bottle_neck, bn_mom)
    bn1 = mx.sym.BatchNorm(data=body, fix_gamma=False, eps=2e-5, momentum=bn_mom, name="bn1")
    relu1 = mx.sym.Activation(data=bn1, act_type="relu", name="relu1")
    pool1 = mx.sym.Pooling(data=relu1, global_pool=True, kernel=(7, 7), pool_type="avg", name="pool1")
    fc1 = mx.sym.FullyConnected(data=mx.sym.Flatten(data=pool1), num_hidden=num_classes, name="fc1")
    return mx.sym.SoftmaxOutput(data=fc1, name="softmax")


def get_symbol(num_classes, num_layers, image_shape=(3, 224, 224), bn_mom=0.9):
    """resnet.py's get_symbol (image_shape a tuple or "3,224,224"). bn_mom reaches
    every batch norm (resnet.py's units keep their default 0.9: the same symbol at
    0.9). Own name scope: the unnamed nodes are numbered as in a fresh process."""
    if isinstance(image_shape, str):
        image_shape = tuple(int(v) for v in image_shape.split(","))
    height = image_shape[1]
    if height <= 28:
        if (num_layers - 2) % 9 == 0 and num_layers >= 164:
            units, filter_list, bottle_neck = [(num_layers - 2) // 9] * 3, [16, 64, 128, 256], True
        elif (num_layers - 2) % 6 == 0 and num_layers < 164:
            units, filter_list, bottle_neck = [(num_layers - 2) // 6] * 3, [16, 16, 32, 64], False
        else:
            raise ValueError("no pre-activation ResNet of %d layers for %s" % (num_layers, image_shape))
    else:
        table = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3],
                 200: [3, 24, 36, 3], 269: [3, 30, 48, 8]}
        if num_layers not in table:
            raise ValueError("no pre-activation ResNet of %d layers" % num_layers)
        units, bottle_neck = table[num_layers], num_layers >= 50
        filter_list = [64, 256, 512, 1024, 2048] if bottle_neck else [64, 64, 128, 256, 512]
    with mx.name.NameManager():
        return resnet(units, filter_list, num_classes, image_shape, bottle_neck, bn_mom)


# ---- forward passes (float64 where MXNet allows it)

def in_float64_or_32(forward):
    """forward(dtype) -> probs; float64, or float32 where MXNet cannot."""
    try:
        return forward("float64"), "float64"
    except mx.base.MXNetError as e:
        log("float64 failed (%s), using float32" % str(e).splitlines()[0])
        return forward("float32"), "float32"


def symbolic_forward(sym, arg_params, aux_params, x, dtype, head="fc1"):
    """Eval-mode forward of a bound copy: (softmax probabilities, head logits) of row 0."""
    group = mx.sym.Group([sym, sym.get_internals()[head + "_output"]])
    ex = group.simple_bind(mx.cpu(), grad_req="null", type_dict={"data": dtype}, data=x.shape)
    for name, arr in ex.arg_dict.items():
        if name in arg_params:
            arr[:] = arg_params[name].astype(dtype)
    for name, arr in ex.aux_dict.items():
        arr[:] = aux_params[name].astype(dtype)
    ex.arg_dict["data"][:] = x.astype(dtype)
    probs, logits = ex.forward(is_train=False)
    return probs.asnumpy()[0].astype(np.float64), logits.asnumpy()[0].astype(np.float64)


def gluon_forward(net, x, dtype):
    """Eval-mode forward of a float32 net cast to dtype (then back): (probs, logits)."""
    net.cast(dtype)
    try:
        logits = net(mx.nd.array(x, dtype=dtype))
        probs = mx.nd.softmax(logits, axis=1)
        return probs.asnumpy()[0].astype(np.float64), logits.asnumpy()[0].astype(np.float64)
    finally:
        net.cast("float32")


def load_symbolic_params(path, sym, data_shape):
    """mx.model.load_params' split of arg:/aux: names, checked against the symbol."""
    arg_params, aux_params, unknown = {}, {}, []
    for key, value in mx.nd.load(path).items():
        kind, _, name = key.partition(":")
        {"arg": arg_params, "aux": aux_params}.get(kind, {})[name] = value
        if kind not in ("arg", "aux"):
            unknown.append(key)
    want_args = [n for n in sym.list_arguments() if n not in ("data", "softmax_label")]
    want_aux = sym.list_auxiliary_states()
    problems = []
    for what, want, have in (("arg", want_args, arg_params), ("aux", want_aux, aux_params)):
        missing = [n for n in want if n not in have]
        extra = sorted(set(have) - set(want))
        if missing:
            problems.append("missing %s: %s" % (what, ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")))
        if extra:
            problems.append("unexpected %s: %s" % (what, ", ".join(extra[:10]) + (" ..." if len(extra) > 10 else "")))
    if unknown:
        problems.append("names without arg:/aux: %s" % ", ".join(unknown[:10]))
    shapes_arg, _, shapes_aux = sym.infer_shape(data=(1,) + tuple(data_shape))
    shapes = dict(zip(sym.list_arguments(), shapes_arg), **dict(zip(want_aux, shapes_aux)))
    for have in (arg_params, aux_params):
        for name, value in have.items():
            if name in shapes and tuple(value.shape) != tuple(shapes[name]):
                problems.append("%s has shape %s, the symbol wants %s" % (name, value.shape, shapes[name]))
    if problems:
        sys.exit("mxnet_models.py: %s does not fit the symbol:\n  %s" % (path, "\n  ".join(problems)))
    return arg_params, aux_params


def symbolic_probs(path, num_classes, num_layers, x):
    sym = get_symbol(num_classes, num_layers, x.shape[1:])
    arg_params, aux_params = load_symbolic_params(path, sym, x.shape[1:])
    return in_float64_or_32(lambda dtype: symbolic_forward(sym, arg_params, aux_params, x, dtype)[0])


def checkpoint_probs(path, x):
    """mx.model.load_checkpoint of prefix-EEEE.params and prefix-symbol.json, as fine-tune.py loads a model."""
    stem = path[:-len(".params")]
    prefix, epoch = stem[:-5], stem[-4:]
    if not path.endswith(".params") or stem[-5] != "-" or not epoch.isdigit():
        sys.exit("mxnet_models.py: %s is not named prefix-EEEE.params" % path)
    sym, arg_params, aux_params = mx.model.load_checkpoint(prefix, int(epoch))
    heads = [n[:-len("_output")] for n in sym.get_internals().list_outputs()
             if n.endswith("_output") and n[:-len("_output")] + "_weight" in arg_params
             and len(arg_params[n[:-len("_output")] + "_weight"].shape) == 2]
    if len(heads) != 1:
        sys.exit("mxnet_models.py: %s: expected one fully-connected head, found %s" % (path, heads))
    return in_float64_or_32(lambda dtype: symbolic_forward(sym, arg_params, aux_params, x, dtype, heads[0])[0])


def gluon_probs(path, num_classes, num_layers, x):
    net = getattr(vision, "resnet%d_v1" % num_layers)(classes=num_classes)
    net.load_parameters(path, ctx=mx.cpu(), allow_missing=False, ignore_extra=False)
    return in_float64_or_32(lambda dtype: gluon_forward(net, x, dtype)[0])


# ---- making the nets

def random_bn(rs, shape):
    """gamma U(0.5, 1.5), beta N(0, 0.2) (float32)."""
    return rs.uniform(0.5, 1.5, shape).astype(np.float32), rs.normal(0, 0.2, shape).astype(np.float32)


def make_symbolic(out_dir, name, num_layers, seed, photo_x, shape, classes):
    rs = np.random.RandomState(seed)
    mx.random.seed(seed)
    calib = get_symbol(classes, num_layers, shape, bn_mom=0.0)
    fixed = ("data", "softmax_label")
    grad_req = {n: "null" if n in fixed else "write" for n in calib.list_arguments()}
    ex = calib.simple_bind(mx.cpu(), grad_req=grad_req, data=(CALIBRATION_IMAGES,) + tuple(shape))
    init, attrs = mx.init.Xavier(**XAVIER), calib.attr_dict()  # as Module.init_params: moving_* carry their __init__
    for pname, arr in list(ex.arg_dict.items()) + list(ex.aux_dict.items()):
        if pname not in fixed:
            init(mx.init.InitDesc(pname, attrs.get(pname)), arr)
    for pname, arr in ex.arg_dict.items():
        if pname.endswith("_gamma"):
            gamma, beta = random_bn(rs, arr.shape)
            arr[:], ex.arg_dict[pname[:-len("gamma")] + "beta"][:] = gamma, beta
        elif pname.endswith("_bias"):
            arr[:] = rs.normal(0, 0.1, arr.shape).astype(np.float32)
    bn_data_gamma = ex.arg_dict["bn_data_gamma"].asnumpy()
    ex.arg_dict["data"][:] = calibration_batch("symbolic", shape).astype(np.float32)
    ex.forward(is_train=True)
    ex.backward()  # MXNet's BatchNorm writes its moving statistics here, unseen by the
    mx.nd.waitall()  # engine's dependencies: wait before reading them
    arg_params = {n: a.copy() for n, a in ex.arg_dict.items() if n not in fixed}
    aux_params = {n: a.copy() for n, a in ex.aux_dict.items()}
    del ex
    arg_params["bn_data_gamma"][:] = bn_data_gamma  # the fix_gamma training step may have set it to 1
    assert abs(aux_params["bn1_moving_var"].asnumpy() - 1).max() > 1e-3, "BatchNorm calibration did not happen"
    sym = get_symbol(classes, num_layers, shape)
    _, logits = symbolic_forward(sym, arg_params, aux_params, photo_x, "float32")
    scale = LOGIT_STD / (logits - arg_params["fc1_bias"].asnumpy()).std()
    arg_params["fc1_weight"] *= float(scale)
    prefix = os.path.join(out_dir, name)
    mx.model.save_checkpoint(prefix, 0, sym, arg_params, aux_params)
    return prefix + "-0000.params"


def set_bn_momentum(net, momentum):
    net.apply(lambda block: block._kwargs.__setitem__("momentum", momentum) if isinstance(block, nn.BatchNorm)
              else None)


def make_gluon(out_dir, name, num_layers, seed, photo_x, shape, classes):
    rs = np.random.RandomState(seed)
    mx.random.seed(seed)
    net = getattr(vision, "resnet%d_v1" % num_layers)(classes=classes)
    net.initialize(mx.init.Xavier(**XAVIER), ctx=mx.cpu())
    net(mx.nd.zeros((1,) + tuple(shape)))  # shapes: finishes the deferred initialization
    params = net.collect_params()
    for pname, p in params.items():
        if pname.endswith("_gamma"):
            gamma, beta = random_bn(rs, p.shape)
            p.set_data(mx.nd.array(gamma))
            params[pname[:-len("gamma")] + "beta"].set_data(mx.nd.array(beta))
        elif pname.endswith("_bias"):
            p.set_data(mx.nd.array(rs.normal(0, 0.1, p.shape).astype(np.float32)))
    set_bn_momentum(net, 0.0)
    with autograd.record(train_mode=True):
        out = net(mx.nd.array(calibration_batch("gluon", shape), dtype="float32"))
    out.backward()  # MXNet's BatchNorm writes its running statistics here (see make_symbolic)
    mx.nd.waitall()
    set_bn_momentum(net, 0.9)
    assert abs(net.features[1].running_var.data().asnumpy() - 1).max() > 1e-3, "BatchNorm calibration did not happen"
    _, logits = gluon_forward(net, photo_x, "float32")
    scale = LOGIT_STD / (logits - net.output.bias.data().asnumpy()).std()
    net.output.weight.set_data(net.output.weight.data() * float(scale))
    path = os.path.join(out_dir, name + ".params")
    net.save_parameters(path)
    return path


def make(out_dir, names):
    unknown = [n for n in names if n not in [net[0] for net in NETS]]
    if unknown:
        sys.exit("mxnet_models.py: unknown nets %s (known: %s)" % (", ".join(unknown), ", ".join(n[0] for n in NETS)))
    os.makedirs(out_dir, exist_ok=True)
    png, grey_png = os.path.join(out_dir, "photo.png"), os.path.join(out_dir, "photo_grey.png")
    rgb = photo()
    assert cv2.imwrite(png, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert (read_rgb(png) == rgb).all()
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    assert cv2.imwrite(grey_png, grey)
    reference = {}
    for name, kind, num_layers, seed, shape, classes in NETS:
        if name not in names:
            continue
        start = time.time()
        x = net_input(kind, rgb if shape[0] == 3 else grey[:, :, None], shape)
        if kind == "symbolic":
            path = make_symbolic(out_dir, name, num_layers, seed, x, shape, classes)
            probs, dtype = symbolic_probs(path, classes, num_layers, x)
        else:
            path = make_gluon(out_dir, name, num_layers, seed, x, shape, classes)
            probs, dtype = gluon_probs(path, classes, num_layers, x)
        top5 = [int(i) for i in np.argsort(-probs)[:5]]
        # MXNet's own float32 forward (MKL-DNN), for the size of float32 rounding against float64.
        if kind == "symbolic":
            sym = get_symbol(classes, num_layers, shape)
            arg_params, aux_params = load_symbolic_params(path, sym, shape)
            probs32 = symbolic_forward(sym, arg_params, aux_params, x, "float32")[0]
        else:
            net = getattr(vision, "resnet%d_v1" % num_layers)(classes=classes)
            net.load_parameters(path, ctx=mx.cpu())
            probs32 = gluon_forward(net, x, "float32")[0]
        reference[name] = {"probs": [float(p) for p in probs], "top5": top5,
                           "input": INPUT[kind if shape[0] == 3 else "grey"], "dtype": dtype,
                           "float32_max_abs_diff": float(np.abs(probs32 - probs).max())}
        count = sum(v.size for v in mx.nd.load(path).values())
        print("%-9s %s: %d values, top-5 %s (%s), max prob %.4f, %s, %.1f s" % (
            name, os.path.basename(path), count, top5, " ".join("%.4f" % probs[i] for i in top5), probs.max(), dtype,
            time.time() - start), flush=True)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f)


def check(kind, path, num_classes, num_layers, png, shape="3,224,224", resize=None):
    if kind not in ("symbolic", "checkpoint", "gluon"):
        sys.exit("mxnet_models.py: KIND is symbolic, checkpoint or gluon, not %r" % kind)
    shape = tuple(int(v) for v in shape.split(","))
    if len(shape) != 3 or shape[0] not in (1, 3) or shape[1] != shape[2] or (resize is None and shape[1] not in RESIZE):
        sys.exit("mxnet_models.py: input shape %s is not 1|3,S,S (with RESIZE unless S is 224 or 28)" % (shape,))
    x = net_input("gluon" if kind == "gluon" else "symbolic", read_image(png, shape[0]), shape,
                  int(resize) if resize else None)
    if kind == "checkpoint":
        probs, dtype = checkpoint_probs(path, x)
    else:
        probs, dtype = (symbolic_probs if kind == "symbolic" else gluon_probs)(path, int(num_classes), int(num_layers), x)
    if len(probs) != int(num_classes):
        sys.exit("mxnet_models.py: %s gives %d classes, not %s" % (path, len(probs), num_classes))
    print(json.dumps({"probs": [float(p) for p in probs], "dtype": dtype}), flush=True)


def main():
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "make":
        make(args[1], args[2:] or DEFAULT_NETS)
    elif 6 <= len(args) <= 8 and args[0] == "check":
        check(*args[1:])
    else:
        sys.exit("usage: mxnet_models.py make OUT_DIR [NET...]\n"
                 "       mxnet_models.py check symbolic|checkpoint|gluon PARAMS NUM_CLASSES NUM_LAYERS PHOTO_PNG "
                 "[C,H,W [RESIZE]]")


if __name__ == "__main__":
    main()
