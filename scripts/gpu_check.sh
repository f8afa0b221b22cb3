#!/usr/bin/env bash
# scripts/gpu_check.sh — one GPU session in one command, for a machine with a GPU and a copy of
# this repository whose .gpu/ was filled by scripts/gpu_pack.sh (binaries built elsewhere):
#   1. ember's CUDA test cases (test_ember: cuda*, cudnn*, nccl*, cublas*, and the op harness,
#      whose backend axis adds `cuda` when a device is present);
#   2. training img/s on synthetic data (train_resnet --benchmark 1): ResNet-50 224x224 batch 64
#      and ResNet-20 28x28 batch 128, cuDNN vs ember's native kernels, fp32/fp16/bf16;
#   3. the same models in PyTorch on the same GPU (scripts/torch_gpu_ref.py), when it is there;
#   4. the Fashion-MNIST recipe of `make train` on the GPU (accuracy and time), cuDNN fp32 and native fp16;
#   5. (not by default) each kernel's time under Nsight Compute (ncu), native and cuDNN, as CSV;
#   6. (not by default) an A/B of train_resnet against .gpu/bin/train_resnet_base.xz, alternating.
#   7. (not by default) kernel_lab: the lab's ops checked and timed, to compare with the emulator's estimates;
#      f16 GEMM and convolutions on the tensor cores and on the FP32 pipes (--tensor-cores 0).
#   8. (not by default) Nsight Compute's sections for the native GEMM kernels (what binds them).
#   9. (not by default) ember against PyTorch, alternating, 3 rounds, ResNet-50 224 batch 64: ember fp16 and
#      bf16 in --layout nchw and nhwc, and TF32, with --profile 1 (launches and host waits per step); PyTorch
#      AMP fp16 and bf16 in NCHW and channels_last, and TF32, with its peak memory; and ResNet-20 28x28
#      batch 128 f32, ember eager and --cuda-graph 1 against PyTorch. `PARTS="1 9 10"` is the GPU issue's
#      check (~9 minutes; part 1 alone, or 9 and 10, fit one 8-minute call each).
#  10. (not by default) the memory-bound kernels' GB/s against the datasheet bandwidth (kernel_lab at a
#      ResNet-50 layer's size, f32 and f16; 16-byte packs, and one element off alignment), ~1 minute.
#  11. (not by default) the tensor-core instructions and convolutions: the mma.sync/ldmatrix/cp.async,
#      conv_mma, gemm_mma and conv + batch norm test cases on the device (the hardware judges the emulator's
#      fragment layouts), then
#      bench_conv_cuda: every ResNet-50 convolution, native against cuDNN per pass, f16 and bf16 channels-last,
#      and the layer-time-weighted ratio; the native f16/bf16 GEMM at 4096^3 against cuBLAS, and the lab's
#      mma.sync ladder at that size; then ResNet-50 training, --conv native against cudnn, nhwc fp16 and bf16,
#      alternating, 3 rounds. `PARTS="11"` is that issue's check (~7 minutes), then PARTS="12".
#  12. (not by default) the same for f32 on TF32 (--tf32 1): the f32 tensor-core tests on the device, the
#      GEMM at 4096^3 against cuBLAS, every ResNet-50 convolution channels-last against cuDNN, and ResNet-50
#      fp32 training nhwc, native against cudnn, 3 rounds (~3 minutes).
# Each part has its own time limit; logs go to $OUT (default /tmp/gpu_check). PARTS="1 2" picks.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}; PARTS=${PARTS:-1 2 3 4}
mkdir -p "$OUT" build
say() { echo "=== $* [$(date +%T)]"; }
wants() { [[ " $PARTS " == *" $1 "* ]]; }

say "setup (ember $(cat .gpu/commit 2>/dev/null))"
for f in .gpu/bin/*.xz; do
  b=build/$(basename "$f" .xz)
  xz -dc "$f" > "$b" 2>/dev/null || python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$f" > "$b"
  chmod +x "$b"
done
mkdir -p /usr/share/datasets/fashion-mnist && cp -n .gpu/fashion-mnist/*.gz /usr/share/datasets/fashion-mnist/ 2>/dev/null
# cuDNN, cuBLAS and NCCL: the machine's CUDA install, else PyTorch's wheels.
libdirs=$PWD/.gpu/lib
py_nvidia=$(python3 -c 'import nvidia, sys; print(*nvidia.__path__)' 2>/dev/null)
for lib in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  ldconfig -p | grep -q "$lib " && continue
  d=$(find /usr/local/cuda*/ $py_nvidia -name "$lib" 2>/dev/null | head -1)
  [ -n "$d" ] && libdirs=$libdirs:$(dirname "$d") || echo "not found: $lib"
done
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
ldd build/test_ember | grep "not found"
nproc

if wants 1; then
  say "1. CUDA test cases"
  timeout 200 build/test_ember -tc="cuda*,cudnn*,nccl*,cublas*,ops:*" --duration=true > "$OUT/tests.log" 2>&1
  echo "exit $?"
  grep -E "ERROR|FATAL|test cases:|assertions:|skip\]|Status|terminate|Abort|Segment|error:" "$OUT/tests.log" | head -80
  sort -t' ' -k1 -gr <(grep -E "^[0-9.]+ s: " "$OUT/tests.log") | head -8
  # A build with a bug planted on purpose (packed by hand as .gpu/bin/test_ember_planted.xz) must fail
  # the test cases named by PLANTED_TESTS.
  if [ -x build/test_ember_planted ]; then
    timeout 60 build/test_ember_planted -tc="${PLANTED_TESTS:-cudnn: TF32*}" > "$OUT/planted.log" 2>&1
    echo "planted-bug build: exit $? (non-zero expected)"
    grep -E "ERROR|test cases:" "$OUT/planted.log" | head -12
  fi
fi

bench() {  # bench LABEL ARGS...: one train_resnet --benchmark run, its median line
  local label=$1; shift
  local line; line=$(timeout 60 build/train_resnet --benchmark 1 --gpus 0 "$@" 2>&1 | tee -a "$OUT/bench.log" \
    | grep -E "Median speed|rror" | tail -1)
  echo "ember $label: ${line:-no result (see bench.log)}"
}
if wants 2; then
  say "2. ember training img/s (synthetic data)"
  r50="--num-layers 50 --image-shape 3,224,224 --batch-size 64 --num-batches 20"
  bench "resnet50-224 batch64 fp32 cudnn --tf32 0" $r50 --tf32 0
  bench "resnet50-224 batch64 fp32 cudnn --tf32 1" $r50 --tf32 1
  bench "resnet50-224 batch64 fp32 cudnn --tf32 1 --cudnn-deterministic 0" $r50 --tf32 1 --cudnn-deterministic 0
  bench "resnet50-224 batch64 fp32 native" $r50 --conv native
  for prec in fp16 bf16; do
    bench "resnet50-224 batch64 $prec cudnn" $r50 --precision $prec
    bench "resnet50-224 batch64 $prec cudnn --cudnn-deterministic 0" $r50 --precision $prec --cudnn-deterministic 0
  done
  bench "resnet50-224 batch64 fp16 cudnn --cudnn-benchmark 1" $r50 --precision fp16 --cudnn-benchmark 1
  bench "resnet50-224 batch64 fp16 cudnn --cudnn-benchmark 1 --cudnn-deterministic 0" $r50 --precision fp16 \
    --cudnn-benchmark 1 --cudnn-deterministic 0
  bench "resnet50-224 batch64 fp16 native (tensor cores)" $r50 --precision fp16 --conv native
  EMBER_CUDA_TENSOR_CORES=0 bench "resnet50-224 batch64 fp16 native (FP32 pipes)" $r50 --precision fp16 --conv native
  bench "resnet50-224 batch64 bf16 native (tensor cores)" $r50 --precision bf16 --conv native
  for conv in cudnn native; do
    bench "resnet20-28 batch128 fp32 $conv" --num-layers 20 --image-shape 1,28,28 --batch-size 128 --num-batches 50 --conv $conv
  done
fi

if wants 3; then
  say "3. PyTorch on the same GPU"
  timeout 120 python3 scripts/torch_gpu_ref.py 2>&1 | tee "$OUT/torch.log" | grep -v Warning
fi

if wants 4; then
  say "4. Fashion-MNIST, the make-train recipe (ResNet-20, 10 epochs) on the GPU: cuDNN fp32, native fp16"
  for run in "cudnn-fp32:--conv cudnn --precision fp32" "native-fp16:--conv native --precision fp16"; do
    t0=$SECONDS; timeout 150 build/train_resnet --gpus 0 --network resnet --num-layers 20 --dataset fashion-mnist \
      --disp-batches 200 ${run#*:} > "$OUT/train-${run%%:*}.log" 2>&1
    echo "${run%%:*}: exit $?, wall $((SECONDS - t0)) s"
    grep -E "Validation-accuracy|rror" "$OUT/train-${run%%:*}.log" | tail -3
  done
fi

if wants 5; then
  say "5. kernel times under Nsight Compute: ResNet-50 batch 64 fp32, native and cuDNN (first 900 launches)"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for conv in native cudnn; do
    timeout 100 "${NCU:-ncu}" --metrics gpu__time_duration.sum --csv --launch-count 900 build/train_resnet --benchmark 1 \
      --gpus 0 --num-layers 50 --image-shape 3,224,224 --batch-size 64 --num-batches 1 --conv $conv --tf32 0 \
      > "$OUT/ncu-$conv.csv" 2>> "$OUT/bench.log"
    echo "ncu $conv: exit $?, $(grep -c gpu__time_duration "$OUT/ncu-$conv.csv") kernel launches timed"
  done
fi
if wants 6 && [ -x build/train_resnet_base ]; then
  # A/B against an earlier build (packed by hand as .gpu/bin/train_resnet_base.xz), alternating, 3 runs each.
  ab=${AB_ARGS:---num-layers 50 --image-shape 3,224,224 --batch-size 64 --num-batches 20 --precision fp16}
  say "6. A/B, base build vs this one, alternating: $ab"
  for i in 1 2 3; do
    for b in train_resnet_base train_resnet; do
      echo "$b: $(timeout 60 build/$b --benchmark 1 --gpus 0 $ab 2>&1 | tee -a "$OUT/bench.log" | grep -E "Median speed|rror" | tail -1)"
    done
  done
fi
if wants 7 && [ -x build/kernel_lab ]; then
  # The lab's ops timed on the GPU, at the shapes docs/runs/kernel_profiles.md profiled on the emulator:
  # measured times to set against the profiler's estimates.
  say "7. kernel_lab: each op checked against the CPU, then timed (median of 20)"
  timeout 120 build/kernel_lab --op all --n 2 --c 64 --hw 56 --k 64 --m 1024 --ncols 1024 --kdim 1024 --reps 20 \
    2>&1 | tee "$OUT/kernel_lab.log" | grep -E "^==|us \(median|FAILED"
  timeout 90 build/kernel_lab --op gemm-ladder --m 1024 --ncols 1024 --kdim 1024 --reps 20 \
    2>&1 | tee -a "$OUT/kernel_lab.log" | grep -E "^==|us \(median|FAILED"
  for tc in 1 0; do  # f16 on the tensor cores, then on the FP32 pipes
    timeout 90 build/kernel_lab --op all --dtype f16 --tensor-cores $tc --n 16 --c 64 --hw 56 --k 64 --m 4096 \
      --ncols 4096 --kdim 4096 --reps 20 2>&1 | tee -a "$OUT/kernel_lab.log" | grep -E "^==|us \(median|FAILED"
  done
  for n in 2 16; do
    timeout 60 build/kernel_lab --op conv2d_backward_data --n $n --c 64 --hw 56 --k 128 --stride 2 --reps 20 \
      2>&1 | tee -a "$OUT/kernel_lab.log" | grep -E "^==|us \(median|FAILED"
  done
fi
if wants 8 && [ -x build/kernel_lab ]; then
  # What binds the native GEMM kernels on this GPU: Nsight Compute's speed-of-light, occupancy,
  # launch, warp-state and scheduler sections for one launch of each (the lab's check launch).
  say "8. Nsight Compute sections of the native GEMM kernels (f16 tensor cores, f16 FP32 pipes, f32)"
  for tc in 1 0; do  # first the lab's timings at docs/runs/kernel_profiles.md's shapes, f16
    timeout 60 build/kernel_lab --op all --dtype f16 --tensor-cores $tc --n 2 --c 64 --hw 56 --k 64 --m 1024 \
      --ncols 1024 --kdim 1024 --reps 20 2>&1 | tee -a "$OUT/kernel_lab.log" | grep -E "^==|us \(median|FAILED"
  done
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
  for run in "gemm-f16-tc:--op gemm --dtype f16 --tensor-cores 1 --m 4096 --ncols 4096 --kdim 4096" \
             "gemm-f16-fp32pipes:--op gemm --dtype f16 --tensor-cores 0 --m 4096 --ncols 4096 --kdim 4096" \
             "conv-fwd-f16-tc:--op conv2d_forward --dtype f16 --n 16 --c 64 --hw 56 --k 64"; do
    timeout 120 "${NCU:-ncu}" $sections --kernel-name regex:gemm_ --launch-count 1 build/kernel_lab ${run#*:} --reps 1 \
      > "$OUT/ncu-${run%%:*}.txt" 2>&1
    echo "ncu ${run%%:*}: exit $?"
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Block Limit Reg|Issued Ipc|No Eligible|Stall|Warp Cycles Per Issued" \
      "$OUT/ncu-${run%%:*}.txt" | head -16
  done
fi
if wants 9; then
  say "9. ember vs PyTorch, ResNet-50 224 batch 64, alternating, 3 rounds (medians of 20 batches / 10 steps)"
  r50="--num-layers 50 --image-shape 3,224,224 --batch-size 64 --num-batches 20"
  torch_run() {  # torch_run NAME: one PyTorch configuration, one timed window
    timeout 90 python3 scripts/torch_gpu_ref.py --repeats 1 --only "$1" 2>&1 | tee -a "$OUT/torch.log" | grep -E "^torch|rror"
  }
  for round in 1 2 3; do
    for prec in fp16 bf16; do
      for layout in nchw nhwc; do
        echo "ember round $round $prec $layout: $(timeout 60 build/train_resnet --benchmark 1 --gpus 0 $r50 \
          --precision $prec --layout $layout --profile 1 2>&1 | tee -a "$OUT/bench.log" \
          | grep -E "Median speed|Device work|Peak device|rror" | tr '\n' ' ')"
      done
      torch_run "resnet50-224 batch64 $prec amp"
      torch_run "resnet50-224 batch64 $prec amp channels_last"
    done
    echo "ember round $round tf32: $(timeout 60 build/train_resnet --benchmark 1 --gpus 0 $r50 --tf32 1 --profile 1 \
      2>&1 | tee -a "$OUT/bench.log" | grep -E "Median speed|Device work|rror" | tr '\n' ' ')"
    torch_run "resnet50-224 batch64 fp32 (tf32 conv)"
    for graph in 0 1; do  # the launch-bound model: eager against one CUDA graph per step
      echo "ember round $round resnet20 fp32 cuda-graph $graph: $(timeout 60 build/train_resnet --benchmark 1 --gpus 0 \
        --num-layers 20 --image-shape 1,28,28 --batch-size 128 --num-batches 50 --tf32 0 --cuda-graph $graph \
        --profile 1 2>&1 | tee -a "$OUT/bench.log" | grep -E "Median speed|Device work|rror" | tr '\n' ' ')"
    done
    torch_run "resnet20-28 batch128 fp32 (no tf32)"
  done
fi
if wants 10 && [ -x build/kernel_lab ]; then
  say "10. memory-bound kernels: GB/s and share of the memory bandwidth (x: [32, 256, 56, 56])"
  for dt in f32 f16; do
    for misalign in 0 1; do
      for op in add add_relu relu_backward batch_norm_add_relu_forward_train batch_norm_add_relu_backward_train; do
        timeout 30 build/kernel_lab --op $op --dtype $dt --misalign $misalign --n 32 --c 256 --hw 56 --reps 20 2>&1 \
          | tee -a "$OUT/bandwidth.log" | grep -E "^==|GB/s|FAILED|rror"
      done
    done
  done
fi
if wants 11; then
  say "11. tensor-core instructions and convolutions: tests on the device, per-layer native/cuDNN, training"
  timeout 150 build/test_ember -tc="ptx*,cuda conv mma*,cuda gemm mma*,cuda conv batch norm*,cuda ptx*" 2>&1 \
    | tee "$OUT/mma_tests.log" | tail -4
  if [ -x build/bench_conv_cuda ]; then
    for dt in f16 bf16; do  # the native GEMM against cuBLAS at 4096^3 (the bar: 70%)
      timeout 60 build/bench_conv_cuda --gemm 4096 --dtype $dt --reps 10 --rounds 3 2>&1 | tee -a "$OUT/gemm.log" | tail -1
    done
    timeout 120 build/kernel_lab --op gemm-tensor-ladder --dtype f16 --m 4096 --ncols 4096 --kdim 4096 --reps 10 2>&1 \
      | tee -a "$OUT/gemm_ladder.log" | grep -E "^==|TFLOP|GFLOP|FAIL|rror"
    for dt in f16 bf16; do
      timeout 100 build/bench_conv_cuda --num-layers 50 --batch-size 64 --image-size 224 --dtype $dt --layout nhwc \
        --reps 10 --rounds 3 2>&1 | tee -a "$OUT/conv_layers.log" | tail -3
    done
  fi
  r50="--num-layers 50 --image-shape 3,224,224 --batch-size 64 --num-batches 20 --layout nhwc"
  for round in 1 2 3; do
    for prec in fp16 bf16; do
      for conv in native cudnn; do
        echo "round $round $prec --conv $conv: $(timeout 60 build/train_resnet --benchmark 1 --gpus 0 $r50 \
          --precision $prec --conv $conv 2>&1 | tee -a "$OUT/mma_train.log" | grep -E "Median speed|rror" | tr '\n' ' ')"
      done
    done
  done
fi
if wants 12; then
  say "12. f32 on TF32 tensor cores: tests on the device, GEMM and per-layer native/cuDNN, training"
  timeout 60 build/test_ember -tc="*TF32*" 2>&1 | tee "$OUT/tf32_tests.log" | tail -4
  if [ -x build/bench_conv_cuda ]; then
    timeout 60 build/bench_conv_cuda --gemm 4096 --dtype f32 --tf32 1 --reps 10 --rounds 3 2>&1 \
      | tee -a "$OUT/gemm.log" | tail -1
    timeout 100 build/bench_conv_cuda --num-layers 50 --batch-size 64 --image-size 224 --dtype f32 --tf32 1 \
      --layout nhwc --reps 5 --rounds 3 2>&1 | tee -a "$OUT/conv_layers.log" | tail -3
  fi
  r50="--num-layers 50 --image-shape 3,224,224 --batch-size 64 --num-batches 20 --layout nhwc"
  for round in 1 2 3; do
    for conv in native cudnn; do
      echo "round $round fp32 --tf32 1 --conv $conv: $(timeout 60 build/train_resnet --benchmark 1 --gpus 0 $r50 \
        --precision fp32 --tf32 1 --conv $conv 2>&1 | tee -a "$OUT/mma_train.log" | grep -E "Median speed|rror" | tr '\n' ' ')"
    done
  done
fi
say "done"
