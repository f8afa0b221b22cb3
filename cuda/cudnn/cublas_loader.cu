// cuda/cudnn/cublas_loader.cu — see cublas_loader.h.
#include "cuda/cudnn/cublas_loader.h"

#include <dlfcn.h>

#include "engine/error.h"

namespace ember::cuda {
namespace {

template <typename F>
void resolve(void* lib, const char* symbol, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, symbol));
  EMBER_CHECK(out != nullptr, cublas_library_name(), ": no symbol ", symbol, " (a cuBLAS older than the headers?)");
}

CublasApi load() {
  const std::string name = cublas_library_name();
  // RTLD_LOCAL: its symbols stay out of the global namespace; nothing else links against them.
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    fail(cat("cannot load ", name, " for the cuBLAS GEMM: ", why ? why : "unknown reason",
             " (install the CUDA toolkit's cuBLAS or put its lib64 on LD_LIBRARY_PATH)"));
  }
  CublasApi api;
  resolve(lib, "cublasCreate_v2", api.create);
  resolve(lib, "cublasSetStream_v2", api.set_stream);
  resolve(lib, "cublasSetMathMode", api.set_math_mode);
  resolve(lib, "cublasSgemm_v2", api.sgemm);
  resolve(lib, "cublasDgemm_v2", api.dgemm);
  resolve(lib, "cublasGemmEx", api.gemm_ex);
  return api;  // the library stays open for the life of the process
}

}  // namespace

std::string cublas_library_name() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

const CublasApi& cublas_api() {
  static const CublasApi api = load();
  return api;
}

}  // namespace ember::cuda
