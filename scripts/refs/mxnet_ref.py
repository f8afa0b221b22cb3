"""scripts/refs/mxnet_ref.py — MXNet 1.9.1's CPU training throughput and record
loader on the workloads ember and PyTorch are timed on: MXNet's side of the
side-by-side benchmark (a benchmark script; ember never needs Python). Run it
with the reference environment's Python (make refs: .refs/mxnet/bin/python).

    python scripts/refs/mxnet_ref.py throughput [--model resnet20|resnet50_224] [--batch N] [--size S]
                                                [--steps 20] [--warmup 3] [--threads 2] [--api gluon|module]
                                                [--amp none|bf16] [--profile N]
    python scripts/refs/mxnet_ref.py loader --rec X.rec --idx X.idx [--size 224] [--batch 64] [--threads T]
                                            [--batches 50] [--warmup-batches 5] [--iter-ctx cpu|gpu]
    python scripts/refs/mxnet_ref.py pack --folder DIR --prefix P

throughput: training img/s, the workloads of scripts/torch_ref.py's throughput
(and so of `build/train_resnet --benchmark 1`):
  model     resnet<6n+2> (resnet20 by default): torch_ref.py's CIFAR-style
            ResNet written as Gluon HybridBlocks: conv 3x3/1 to 16 channels
            (no bias) + BN + relu, 3 stages of n BasicBlocks (16, 32, 64
            channels; the first block of stages 2 and 3 has stride 2 and a 1x1
            conv + BN projection), global average pool, dense; 1x28x28 input
            (--size), batch 128.
            resnet50_224: torchvision's ResNet-50 (v1.5: the stride on the
            bottleneck's 3x3 conv, no conv biases, 1x1 conv + BN downsample,
            7x7/2 stem + 3x3/2 max pool), 3x224x224, batch 16, 1000 classes
            (--classes; torch_ref.py builds it with 10, the fc is ~0.1% of the
            step). NOT Gluon's model-zoo resnet50_v1, which strides the first
            1x1 and gives its 1x1 convs biases; the output line says
            structure=torchvision-v1.5.
            Both are built with their input channels given, so nothing is
            deferred; BN is eps 1e-5, momentum 0.9 (PyTorch's 0.1).
  input     random normal images and random labels (10 classes, 1000 for
            resnet50_224), made once, as torch_ref.py and ember do.
  step      --api gluon (default): net.hybridize(static_alloc, static_shape);
            gluon.Trainer SGD lr 0.1, momentum 0.9, wd 5e-4 (on every
            parameter, as torch.optim.SGD's weight_decay);
            SoftmaxCrossEntropyLoss under autograd.record(), loss.backward(),
            trainer.step(batch) (the gradient of the mean loss, as
            F.cross_entropy's).
            --api module: the same block called on mx.sym.var('data') +
            SoftmaxOutput, bound by mx.mod.Module with the same SGD
            (rescale_grad 1/batch), forward_backward + update, starting
            from the Gluon block's initial weights.
  amp       bf16 (--api gluon only): MXNet's automatic mixed precision,
            mx.contrib.amp.init(target_dtype='bfloat16') before the network
            is built, so that Convolution and FullyConnected run in bf16 on
            oneDNN's bf16 kernels (avx512_core_bf16 on CPUs with AVX512-BF16,
            emulated on other AVX-512 CPUs; casts around them) while
            BatchNorm, the loss and the fp32 weights stay as AMP's lists say;
            no loss scaler (amp.init_trainer), which bf16 does not need
            (fp32's exponent range) and whose overflow check costs a pass over
            every gradient. The yardstick of `train_resnet --precision bf16`.
  timing    --warmup untimed steps (at least one: the first builds oneDNN's
            primitives, and a mode this CPU cannot run fails there with
            one line), then --steps timed back to back; MXNet is
            asynchronous, so mx.nd.waitall() before starting and before
            stopping the clock; rate = steps x batch / seconds.
  threads   MXNet sizes its OpenMP pool (MKL-DNN's and its operators') when it
            is loaded, so the script sets OMP_NUM_THREADS=--threads (and
            MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) with
            MXNET_CPU_WORKER_NTHREADS=1 (one engine worker) before it imports
            mxnet; whatever the caller's environment says is overridden.

loader: images/s of mx.io.ImageRecordIter over a RecordIO file, the
augmentation of ember's record loader (scripts/bench_loader.sh) and
scripts/torch_loader.py: random_resized_crop=True, min_random_area 0.08,
max_random_area 1, min_aspect_ratio 3/4, max_aspect_ratio 4/3 to --size x
--size, rand_mirror, shuffle (through the .idx), float32 NCHW batches of
--batch (ImageRecordIter's output as it gives it; ember's loader gives
uint8, torchvision's PILToTensor uint8 too). MXNet draws area and
aspect uniformly (torchvision: aspect log-uniform) and falls back to a centre
crop after 10 tries. Only full batches are counted (round_batch off, padded
last batches skipped); after --warmup-batches it times --batches batches,
resetting the iterator at each epoch's end (the reset is timed, as it would
be in training; ember and torch_loader.py time whole passes after a warm-up
pass: --warmup-batches and --batches that are multiples of the full batches
per epoch match that). Threads: --iter-ctx cpu (default) is MXNet's CPU iterator
(ctx='cpu'), which decodes with the OpenMP pool, so the script sets
OMP_NUM_THREADS=--threads before the import; --iter-ctx gpu is
ImageRecordIter's default prefetching iterator (it runs on CPU-only builds),
whose preprocess_threads MXNet caps at half the processors (1 on a 2-core
machine). The line gives decode_threads as MXNet reported it in its log.

pack: MXNet's own tools/im2rec.py (in the mxnet package) on a folder of class
subfolders of JPEGs: --list --recursive (a shuffled P.lst, a label per
subfolder), then --pass-through --num-thread 2 (the JPEG bytes as they are:
what ember's `im2rec --pass-through 1` packs) to P.rec and P.idx.

Each mode prints one line; on stderr go MXNet's log, the trainable parameter
count (resnet20 on 1 channel: 272,186, as torch_ref.py's; resnet50_224:
25,557,032, torchvision's; 23,528,522 with --classes 10) and how many cores
the process kept busy while timed (under --threads: other work had the CPUs,
and OpenMP's barriers make that cost far more than the share taken). E.g.:
    mxnet 1.9.1 gluon-hybridized mkldnn=1 resnet20 batch=128 size=28 threads=2 fp32 train img/s=427.6
    mxnet 1.9.1 ImageRecordIter ctx=cpu threads=2 decode_threads=2 size=224 batch=64 img/s=1199.5
    mxnet 1.9.1 im2rec packed 200 images into P.rec
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

PROG = "mxnet_ref.py"
INSTALL = "make refs, then run with .refs/mxnet/bin/python"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def import_mxnet(threads):
    """Sets MXNet's thread counts in the environment, then imports it (the pool is fixed at load)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ["MXNET_CPU_WORKER_NTHREADS"] = "1"
    if "mxnet" in sys.modules:
        sys.exit(f"{PROG}: mxnet was imported before its thread counts were set")
    try:
        import mxnet
    except ImportError:
        sys.exit(f"{PROG}: Python module 'mxnet' is missing: {INSTALL}")
    return mxnet


def cpu_seconds():
    """User + system CPU time of this process, all its threads."""
    t = os.times()
    return t.user + t.system


def mkldnn_state(mx):
    return int(mx.runtime.Features().is_enabled("MKLDNN"))


# ---- the networks

def projection(mx, cin, cout, stride):
    """A block's shortcut: 1x1 conv + BN where the shape changes (torchvision's downsample), else None."""
    if stride == 1 and cin == cout:
        return None
    nn = mx.gluon.nn
    seq = nn.HybridSequential(prefix="downsample_")
    with seq.name_scope():
        seq.add(nn.Conv2D(cout, 1, stride, use_bias=False, in_channels=cin), nn.BatchNorm(in_channels=cout))
    return seq


def cifar_resnet(mx, depth, in_channels, classes):
    """ResNet-<depth> (depth = 6n + 2) as torch_ref.py's cifar_resnet, in Gluon."""
    nn = mx.gluon.nn
    if depth < 8 or (depth - 2) % 6:
        sys.exit(f"{PROG}: resnet{depth}: CIFAR-style depths are 6n+2 (20, 32, 44, 56, 110)")
    blocks = (depth - 2) // 6

    class BasicBlock(mx.gluon.HybridBlock):
        def __init__(self, cin, cout, stride, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.conv1 = nn.Conv2D(cout, 3, stride, 1, use_bias=False, in_channels=cin)
                self.bn1 = nn.BatchNorm(in_channels=cout)
                self.conv2 = nn.Conv2D(cout, 3, 1, 1, use_bias=False, in_channels=cout)
                self.bn2 = nn.BatchNorm(in_channels=cout)
                self.downsample = projection(mx, cin, cout, stride)

        def hybrid_forward(self, F, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + (x if self.downsample is None else self.downsample(x)))

    net = nn.HybridSequential(prefix=f"resnet{depth}_")
    with net.name_scope():
        net.add(nn.Conv2D(16, 3, 1, 1, use_bias=False, in_channels=in_channels), nn.BatchNorm(in_channels=16),
                nn.Activation("relu"))
        cin = 16
        for stage, width in enumerate((16, 32, 64)):
            for b in range(blocks):
                net.add(BasicBlock(cin, width, 2 if stage > 0 and b == 0 else 1))
                cin = width
        net.add(nn.GlobalAvgPool2D(), nn.Dense(classes, in_units=64))
    return net


def torchvision_resnet50(mx, classes):
    """torchvision's resnet50 (v1.5) in Gluon: the stride on the 3x3, no conv biases, 1x1 + BN downsample."""
    nn = mx.gluon.nn

    class Bottleneck(mx.gluon.HybridBlock):
        def __init__(self, cin, width, stride, **kwargs):
            super().__init__(**kwargs)
            cout = width * 4
            with self.name_scope():
                self.conv1 = nn.Conv2D(width, 1, 1, use_bias=False, in_channels=cin)
                self.bn1 = nn.BatchNorm(in_channels=width)
                self.conv2 = nn.Conv2D(width, 3, stride, 1, use_bias=False, in_channels=width)
                self.bn2 = nn.BatchNorm(in_channels=width)
                self.conv3 = nn.Conv2D(cout, 1, 1, use_bias=False, in_channels=width)
                self.bn3 = nn.BatchNorm(in_channels=cout)
                self.downsample = projection(mx, cin, cout, stride)

        def hybrid_forward(self, F, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return F.relu(out + (x if self.downsample is None else self.downsample(x)))

    net = nn.HybridSequential(prefix="resnet50_")
    with net.name_scope():
        net.add(nn.Conv2D(64, 7, 2, 3, use_bias=False, in_channels=3), nn.BatchNorm(in_channels=64),
                nn.Activation("relu"), nn.MaxPool2D(3, 2, 1))
        cin = 64
        for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            for b in range(blocks):
                net.add(Bottleneck(cin, width, 2 if stage > 0 and b == 0 else 1))
                cin = width * 4
        net.add(nn.GlobalAvgPool2D(), nn.Dense(classes, in_units=2048))
    return net


def make(mx, model, in_channels, classes):
    """The model named on the command line, and the structure it has (for the output line)."""
    if model == "resnet50_224":
        return torchvision_resnet50(mx, classes), "torchvision-v1.5"
    if model.startswith("resnet") and model[6:].isdigit() and model != "resnet18":
        return cifar_resnet(mx, int(model[6:]), in_channels, classes), None
    sys.exit(f"{PROG}: --model {model} is not built here (resnet20 or another 6n+2 depth, resnet50_224)")


def trainable_count(net):
    """Parameters with gradients (what torch's model.parameters() counts: no running statistics)."""
    total = 0
    for p in net.collect_params().values():
        if p.grad_req != "null":
            n = 1
            for d in p.shape:
                n *= d
            total += n
    return total


# ---- throughput

def throughput(args):
    mx = import_mxnet(args.threads)
    import numpy as np
    from mxnet import autograd, gluon

    if args.amp == "bf16":  # before the network exists: AMP wraps the operators it will be built from
        from mxnet.contrib import amp
        amp.init(target_dtype="bfloat16")
    mx.random.seed(0)
    np.random.seed(0)
    in_channels = 3 if args.model == "resnet50_224" else 1
    classes = args.classes or (1000 if args.model == "resnet50_224" else 10)
    net, structure = make(mx, args.model, in_channels, classes)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=mx.cpu())
    log(f"{PROG}: {args.model}{' (' + structure + ')' if structure else ''}: "
        f"{trainable_count(net):,} trainable parameters, {classes} classes")
    shape = (args.batch, in_channels, args.size, args.size)
    x = mx.nd.random.normal(shape=shape)
    y = mx.nd.array(np.random.randint(0, classes, args.batch))
    opt_params = {"learning_rate": 0.1, "momentum": 0.9, "wd": 5e-4}

    if args.api == "gluon":
        api = "gluon-hybridized"
        net.hybridize(static_alloc=True, static_shape=True)
        trainer = gluon.Trainer(net.collect_params(), "sgd", opt_params)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

        def step():
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(args.batch)
    else:
        api = "module"
        sym = mx.sym.SoftmaxOutput(net(mx.sym.var("data")), mx.sym.var("softmax_label"), name="softmax")
        params = {p.name: p.data() for p in net.collect_params().values()}
        arg_names, aux_names = set(sym.list_arguments()), set(sym.list_auxiliary_states())
        mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
        mod.bind(data_shapes=[("data", shape)], label_shapes=[("softmax_label", (args.batch,))])
        mod.init_params(arg_params={k: v for k, v in params.items() if k in arg_names},
                        aux_params={k: v for k, v in params.items() if k in aux_names}, allow_missing=False)
        mod.init_optimizer(optimizer="sgd", optimizer_params=dict(opt_params, rescale_grad=1.0 / args.batch))
        batch = mx.io.DataBatch(data=[x], label=[y])

        def step():
            mod.forward_backward(batch)
            mod.update()

    try:  # the first step builds oneDNN's primitives: where a mode has none for this CPU, it fails here
        step()
        mx.nd.waitall()
    except mx.base.MXNetError as e:
        reason = next((line for line in str(e).splitlines() if line.strip()), "no message")
        if args.amp == "bf16":
            sys.exit(f"{PROG}: MXNet's bf16 AMP cannot train on this CPU (oneDNN's bf16 convolutions need AVX-512): "
                     f"{reason}")
        raise
    for _ in range(max(args.warmup - 1, 0)):
        step()
    mx.nd.waitall()
    start, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(args.steps):
        step()
    mx.nd.waitall()
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    log(f"{PROG}: {args.steps} steps in {seconds:.2f} s, the process busy on {cpu / seconds:.2f} cores")
    model = args.model + (f" structure={structure}" if structure else "")
    precision = "bf16-amp" if args.amp == "bf16" else "fp32"
    print(f"mxnet {mx.__version__} {api} mkldnn={mkldnn_state(mx)} {model} batch={args.batch} size={args.size} "
          f"threads={args.threads} {precision} train img/s={args.steps * args.batch / seconds:.1f}", flush=True)
    if args.profile > 0:  # where the time goes, per operator (MXNet's aggregate statistics, on stderr)
        with tempfile.TemporaryDirectory() as d:
            mx.profiler.set_config(profile_all=True, aggregate_stats=True, filename=os.path.join(d, "profile.json"))
            mx.profiler.set_state("run")
            for _ in range(args.profile):
                step()
            mx.nd.waitall()
            mx.profiler.set_state("stop")
            log(f"profile of {args.profile} steps:\n" + mx.profiler.dumps(reset=True))


# ---- loader

def make_iter(mx, args):
    """The ImageRecordIter, and the decode thread count MXNet logs while making it (its stderr, read back)."""
    kwargs = dict(path_imgrec=args.rec, path_imgidx=args.idx, data_shape=(3, args.size, args.size),
                  batch_size=args.batch, shuffle=True, seed=args.seed, round_batch=False,
                  random_resized_crop=True, min_random_area=0.08, max_random_area=1.0,
                  min_aspect_ratio=3.0 / 4.0, max_aspect_ratio=4.0 / 3.0, rand_mirror=True,
                  preprocess_threads=args.threads, ctx=args.iter_ctx, verbose=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            it = mx.io.ImageRecordIter(**kwargs)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = captured.read().decode(errors="replace")
    sys.stderr.write(text)
    found = re.findall(r"use (\d+) threads for decoding", text)
    return it, (found[-1] if found else "?")


def loader(args):
    for path in (args.rec, args.idx):
        if not os.path.isfile(path):
            sys.exit(f"{PROG}: no such file: {path}")
    mx = import_mxnet(args.threads)
    it, decode_threads = make_iter(mx, args)

    def full_batches():
        """Endless: the images of each full batch, epoch after epoch."""
        while True:
            got = False
            for batch in it:
                data = batch.data[0]
                data.wait_to_read()
                if batch.pad == 0 and data.shape[0] == args.batch:
                    got = True
                    yield data.shape[0]
            if not got:
                sys.exit(f"{PROG}: {args.rec} holds fewer than --batch {args.batch} images")
            it.reset()

    batches = full_batches()
    for _ in range(args.warmup_batches):
        next(batches)
    images = 0
    start, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(args.batches):
        images += next(batches)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    log(f"{PROG}: {images} images in {seconds:.2f} s, the process busy on {cpu / seconds:.2f} cores")
    print(f"mxnet {mx.__version__} ImageRecordIter ctx={args.iter_ctx} threads={args.threads} "
          f"decode_threads={decode_threads} size={args.size} batch={args.batch} img/s={images / seconds:.1f}",
          flush=True)


# ---- pack

def pack(args):
    if not os.path.isdir(args.folder):
        sys.exit(f"{PROG}: no such folder: {args.folder}")
    mx = import_mxnet(1)
    im2rec = os.path.join(os.path.dirname(mx.__file__), "tools", "im2rec.py")
    if not os.path.isfile(im2rec):
        sys.exit(f"{PROG}: MXNet's im2rec.py is not at {im2rec}")
    prefix, folder = os.path.abspath(args.prefix), os.path.abspath(args.folder)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    for extra in (["--list", "--recursive"], ["--pass-through", "--num-thread", "2"]):
        run = subprocess.run([sys.executable, im2rec, *extra, prefix, folder], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        if run.returncode:
            sys.exit(f"{PROG}: im2rec.py {' '.join(extra)} failed:\n{run.stdout}")
    for ext in (".rec", ".idx"):
        if not os.path.isfile(prefix + ext):
            sys.exit(f"{PROG}: im2rec.py made no {prefix + ext}")
    with open(prefix + ".idx") as f:
        count = sum(1 for line in f if line.strip())
    print(f"mxnet {mx.__version__} im2rec packed {count} images into {prefix}.rec", flush=True)


# ---- command line

def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="MXNet 1.9.1's CPU training throughput and ImageRecordIter rate on ember's benchmark "
                    "workloads (the reference environment's Python: .refs/mxnet/bin/python).")
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("throughput", help="training img/s on synthetic data")
    t.add_argument("--model", default="resnet20", help="resnet20 (any 6n+2 depth) or resnet50_224")
    t.add_argument("--batch", type=int, help="images per step (default 128; 16 for resnet50_224)")
    t.add_argument("--size", type=int, help="image side in pixels (default 28; 224 for resnet50_224)")
    t.add_argument("--classes", type=int, help="classes (default 10; 1000 for resnet50_224)")
    t.add_argument("--steps", type=int, default=20, help="timed steps")
    t.add_argument("--warmup", type=int, default=3, help="untimed steps first (at least 1 is run)")
    t.add_argument("--threads", type=int, default=2, help="OpenMP threads (OMP_NUM_THREADS, set before import)")
    t.add_argument("--api", choices=["gluon", "module"], default="gluon", help="Gluon + Trainer or mx.mod.Module")
    t.add_argument("--amp", choices=["none", "bf16"], default="none",
                   help="bf16: MXNet's AMP with target_dtype bfloat16 (Gluon only)")
    t.add_argument("--profile", type=int, default=0,
                   help="then N more steps under MXNet's profiler: time per operator, on stderr")
    lo = sub.add_parser("loader", help="mx.io.ImageRecordIter img/s with random-resized-crop + mirror")
    lo.add_argument("--rec", required=True, help="the .rec file")
    lo.add_argument("--idx", required=True, help="its .idx file")
    lo.add_argument("--size", type=int, default=224, help="output side in pixels")
    lo.add_argument("--batch", type=int, default=64, help="images per batch")
    lo.add_argument("--threads", type=int, default=2, help="decode threads")
    lo.add_argument("--batches", type=int, default=50, help="timed full batches (across epochs)")
    lo.add_argument("--warmup-batches", type=int, default=5, help="untimed full batches first")
    lo.add_argument("--iter-ctx", choices=["cpu", "gpu"], default="cpu",
                    help="cpu: MXNet's CPU iterator, OpenMP threads; gpu: the default prefetching one, "
                         "preprocess_threads capped at half the processors")
    lo.add_argument("--seed", type=int, default=0, help="shuffle seed")
    pk = sub.add_parser("pack", help="MXNet's tools/im2rec.py: a folder of class subfolders to P.rec/P.idx")
    pk.add_argument("--folder", required=True, help="folder of class subfolders of JPEGs")
    pk.add_argument("--prefix", required=True, help="output prefix P (writes P.lst, P.rec, P.idx)")
    a = p.parse_args(argv)
    if a.what == "throughput":
        big = a.model == "resnet50_224"
        a.batch = a.batch if a.batch is not None else (16 if big else 128)
        a.size = a.size if a.size is not None else (224 if big else 28)
        names = ("batch", "size", "steps", "threads") + (("classes",) if a.classes is not None else ())
        if a.warmup < 0:
            p.error("--warmup must be at least 0")
        if a.amp != "none" and a.api != "gluon":
            p.error("--amp bf16 needs --api gluon (MXNet's AMP trains through gluon.Trainer)")
    elif a.what == "loader":
        names = ("size", "batch", "threads", "batches")
        if a.warmup_batches < 0:
            p.error("--warmup-batches must be at least 0")
    else:
        names = ()
    for name in names:
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    {"throughput": throughput, "loader": loader, "pack": pack}[args.what](args)


if __name__ == "__main__":
    main()
