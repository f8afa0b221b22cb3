// apps/train_resnet.cpp — train a ResNet from scratch (MXNet's train_*.py).
//
//   build/train_resnet --network resnet --num-layers 20 --dataset fashion-mnist
//   build/train_resnet --num-layers 50 --data-train train.erec --data-val val.erec --gpus 0
//   build/train_resnet --data-train train.erec --test-io 1          # the loader alone
//   build/train_resnet --benchmark 1 --num-layers 50 --image-shape 3,224,224
//   build/train_resnet --nproc 2 ...        data-parallel: two workers here
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=host0 build/train_resnet ...  (one per host)
//
// Builds the model, the data source (Fashion-MNIST in memory, or record
// files through the threaded loader) and the optimizer from the flags,
// prints a start line with every setting, and hands over to fit()
// (apps/training/fit.h), which prints the MXNet-style progress lines and
// saves a checkpoint per epoch. In a data-parallel run each rank does the
// same on its shard of the data (apps/training/distributed.h); only rank 0
// prints and saves. All of it is apps/training/train_program.h: this program
// is that flow with nothing added.
#include "apps/training/distributed.h"
#include "apps/training/nccl_factory.h"
#include "apps/training/train_program.h"

int main(int argc, char** argv) {
  try {
    ember::apps::TrainProgram program;
    program.name = "train_resnet";
    program.summary = "Train a ResNet from scratch on the CPU or a GPU (MXNet-style flags).";
#if defined(EMBER_CUDA) && defined(EMBER_NCCL)
    program.nccl = ember::apps::nccl_comm_factory();
#endif
    return ember::apps::run_train_program(program, argc, argv);
  } catch (const std::exception& e) {  // ember::Error and anything the standard library throws
    return ember::apps::report_fatal("train_resnet", e);
  }
}
