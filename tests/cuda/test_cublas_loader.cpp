// tests/cuda/test_cublas_loader.cpp — cuBLAS is opened on first use, not at
// program start (cuda/cudnn/cublas_loader.h): the test binary has not loaded
// it before the test asks, every entry point then resolves, and the process
// did not link against it. Needs no GPU; builds with cuDNN only.
#include <doctest/doctest.h>

#if defined(EMBER_CUDNN) && !defined(EMBER_CUDASIM)
#include <dlfcn.h>
#include <link.h>

#include <string>

#include "cuda/cudnn/cublas_loader.h"
#include "tests/cuda/cuda_test_env.h"

namespace {

// Whether a shared object whose path contains `name` is mapped in this process.
bool library_loaded(const std::string& name) {
  struct Search {
    std::string name;
    bool found = false;
  } search{name};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name && std::string(info->dlpi_name).find(s->name) != std::string::npos) s->found = true;
        return 0;
      },
      &search);
  return search.found;
}

TEST_CASE("cublas loader: libcublas is opened on first use, with every entry point") {
  const std::string lib = ember::cuda::cublas_library_name();
  CHECK(lib.rfind("libcublas.so.", 0) == 0);
  // Without a GPU nothing before this test touches the cuBLAS table, so the
  // library must not be mapped yet: it is not a link-time dependency. (With
  // one, the cuDNN table's tests may have opened it already.)
  if (!ember::testing::cuda_available()) CHECK_FALSE(library_loaded("libcublas.so"));
  const ember::cuda::CublasApi& api = ember::cuda::cublas_api();
  CHECK(library_loaded(lib));
  CHECK(bool(api.create));
  CHECK(bool(api.set_stream));
  CHECK(bool(api.set_math_mode));
  CHECK(bool(api.sgemm));
  CHECK(bool(api.dgemm));
  CHECK(bool(api.gemm_ex));
  CHECK(&ember::cuda::cublas_api() == &api);  // resolved once
}

}  // namespace
#endif
