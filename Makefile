# ember — one Makefile for everything.
#
#   make              build the library, the apps and the tests (CPU always,
#                     CUDA when nvcc is found, the CUDA emulator when CUDA's
#                     headers are found); prints what it found
#   make test         the quick check (the plain build, then ~3 min of suites): install
#                     missing Debian packages, build for this machine (no
#                     nvcc without a GPU), run the doctest suite
#                     (GPU test cases skip without a device), the CUDA kernels
#                     on the emulator, and the commands of docs/guide.md
#   make check        everything CI runs: make test's
#                     suites, the emulator again with CUDASIM_SCHEDULE=reverse,
#                     the CPU suite and the emulator suite under
#                     AddressSanitizer + UBSan, the threaded loader and packer
#                     tests under ThreadSanitizer, and every libFuzzer target
#                     for FUZZ_CI_SECONDS (tests/fuzz/fuzz.mk)
#   make train        install missing packages, build train_resnet, train ResNet-20
#                     on Fashion-MNIST (a 7-epoch one-cycle recipe)
#   make deps         only install what is missing (apt-get, needs root)
#   make torch-deps   also Debian's PyTorch + torchvision (the optional
#                     full-size parity tests; fixture generators)
#   make clean
#
# Toggles (Darknet style):  CUDA=0|1  (default: 1 when nvcc is on the PATH)
#                           CUDA_ARCH="80 90"   SM numbers for nvcc (machine code for each,
#                                     and PTX for the newest, so newer GPUs JIT it;
#                                     80 or newer: the bf16 tensor-core kernels)
#                           CUDNN=0|1 (default: 1 when cudnn.h is found)
#                           NCCL=0|1  (default: 1 when nccl.h is found; --kv-store nccl)
#                           SIM=0|1   (default: 1 when cuda_runtime.h is found)
#                           ARCH=x86-64-v2  the CPU the C++ is compiled for
#                                     (-march; default: any x86-64 since 2009; the
#                                     GEMM kernels are picked at run time anyway,
#                                     ARCH=native adds compile-time AVX-512 to the rest)
#                           JPEG=turbo|stb  JPEG codec (default: turbo when libjpeg-turbo's
#                                     jpeglib.h is found; stb = stb_image only)
#                           DEBUG=1   -O0 -g
#                           SANITIZE=1  AddressSanitizer + UBSan (use another BUILD=)

CXX      ?= g++
BUILD    ?= build
CUDA_ARCH ?= 80 90
MACHINE   := $(shell uname -m)
ARCH      ?= $(if $(filter x86_64,$(MACHINE)),x86-64-v2,native)

# ------------------------------------------------------------ what is here
NVCC_PATH := $(shell command -v nvcc 2>/dev/null)
# CUDA given on the command line or in the environment (make test and make
# train then keep it; see LOCAL_CUDA below).
CUDA_CHOSEN := $(filter command environment,$(firstword $(origin CUDA)))
ifeq ($(origin CUDA),undefined)
  CUDA := $(if $(NVCC_PATH),1,0)
endif
CUDA_HOME ?= $(if $(NVCC_PATH),$(patsubst %/bin/nvcc,%,$(NVCC_PATH)),/usr/local/cuda)
CUDA_RUNTIME_H := $(wildcard $(CUDA_HOME)/include/cuda_runtime.h)
CUDNN_H   := $(firstword $(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h))
NCCL_H    := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
ifeq ($(origin CUDNN),undefined)
  CUDNN := $(if $(and $(filter 1,$(CUDA)),$(CUDNN_H)),1,0)
endif
ifeq ($(origin NCCL),undefined)
  NCCL := $(if $(and $(filter 1,$(CUDA)),$(NCCL_H)),1,0)
endif
ifeq ($(origin SIM),undefined)
  SIM := $(if $(CUDA_RUNTIME_H),1,0)
endif
# libjpeg-turbo's libjpeg API (Debian's libjpeg62-turbo-dev; jconfig.h names the version).
JPEG_TURBO_H := $(shell grep -ls LIBJPEG_TURBO_VERSION /usr/include/jconfig.h /usr/include/$(MACHINE)-linux-gnu/jconfig.h 2>/dev/null | head -n 1)
ifeq ($(origin JPEG),undefined)
  JPEG := $(if $(JPEG_TURBO_H),turbo,stb)
endif

# ------------------------------------------------------------------- flags
WARN     := -Wall -Wextra
# Test sources compile at -Og (OPT_TESTS): a third of the compile time of
# -O3 and two thirds of -O1's, and the suites spend their time in the
# library, not in the tests' own code.
ifeq ($(DEBUG),1)
  OPT    := -O0 -g
  OPT_TESTS := $(OPT)
else
  OPT    := -O3 -march=$(ARCH) -g1
  OPT_TESTS := -Og -march=$(ARCH) -g1
endif
ifeq ($(SANITIZE),1)
  # Any UBSan report stops the program (by default UBSan prints and goes on,
  # and a test run would pass with undefined behaviour in it).
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
  LDSAN    := -fsanitize=address,undefined -fno-sanitize-recover=all
  # The rest of the tree (engine, net, data, apps, the tests) at -Og
  # (SAN_OPT): 2/3 of -O1's compile time under the sanitizers (this tree's
  # compiler time 763 s against 1026 s at -O1), and the sanitizer suites ran
  # as fast (ASan test_ember: 173 and 169 s at -Og, 173 and 158 s at -O1). The
  # numeric kernels and the emulator, where the suites spend their time, get
  # -O2 (see the pattern rules below). Not -O3: with UBSan, -O3 doubles their
  # compile time (cuda/kernels/conv.cu for the emulator: 179 s at -O3, 72 s at
  # -O2, 45 s at -O1) for no measurable speed of the suites (the emulator's
  # convolution and GEMM tests: 78-102 s at -O3, 84-93 s at -O2; -O1: 122-133 s).
  OPT_KERNELS := $(if $(filter 1,$(DEBUG)),-O0 -g,-O2 -march=$(ARCH) -g1) $(SANFLAGS)
  SAN_OPT  ?= -Og
  OPT      := $(if $(filter 1,$(DEBUG)),-O0 -g,$(SAN_OPT) -march=$(ARCH) -g1) $(SANFLAGS)
  OPT_TESTS := $(OPT)
endif
CPPFLAGS := -I. -MMD -MP
CXXFLAGS  = -std=c++20 $(OPT) -fopenmp $(WARN)
LDFLAGS  := -fopenmp $(LDSAN)
LDLIBS   := -lz -lstb -lpthread
ifeq ($(JPEG),turbo)
  CPPFLAGS += -DEMBER_JPEG_TURBO=1
  LDLIBS   += -ljpeg
endif

CUDA_LDLIBS :=
ifeq ($(CUDA),1)
  ifeq ($(NVCC_PATH),)
    $(error CUDA=1 but nvcc is not on the PATH)
  endif
  NVCC        := $(NVCC_PATH)
  OLD_ARCH    := $(strip $(foreach a,$(CUDA_ARCH),$(if $(shell [ "$(a)" -lt 80 ] 2>/dev/null && echo old),$(a))))
  ifneq ($(OLD_ARCH),)
    $(error CUDA_ARCH="$(CUDA_ARCH)" has $(OLD_ARCH): ember's tensor-core kernels need sm 80 or newer (bf16 WMMA); e.g. CUDA_ARCH="80 90")
  endif
  PTX_ARCH    := $(lastword $(shell printf '%s\n' $(CUDA_ARCH) | sort -n))
  GENCODE     := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
                 -gencode arch=compute_$(PTX_ARCH),code=compute_$(PTX_ARCH)
  NVCCFLAGS   := -std=c++20 -O3 $(GENCODE) -I. -MMD -MP -Xcompiler "$(WARN) -fopenmp" --expt-relaxed-constexpr \
                 -DEMBER_CUDA_ARCH_LIST='"$(strip $(CUDA_ARCH))"'
  CPPFLAGS    += -DEMBER_CUDA=1 -I$(CUDA_HOME)/include
  CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
  ifeq ($(CUDNN),1)
    NVCCFLAGS   += -DEMBER_CUDNN=1
    CPPFLAGS    += -DEMBER_CUDNN=1
    # cuBLAS is not linked: cuda/cudnn/cublas_loader.h opens it on first use.
    CUDA_LDLIBS += -lcudnn
  endif
  ifeq ($(NCCL),1)
    NVCCFLAGS   += -DEMBER_NCCL=1
    CPPFLAGS    += -DEMBER_NCCL=1
    CUDA_LDLIBS += -lnccl
  endif
endif
# The emulator: the same .cu files through g++, against CUDA's headers.
SIMFLAGS := -x c++ -DEMBER_CUDASIM=1 -I$(CUDA_HOME)/include
# ... and instrumented for its profiler (CUDASIM_PROFILE=1, cuda/sim/README.md
# "Profiling"): g++'s ThreadSanitizer instrumentation calls a hook before
# every load and store of the kernels (cuda/kernels/, not the host code of
# cuda/*.cu), and cuda/sim/profiler.cpp defines the hooks (no TSan runtime
# is linked); no vectorisation, so that one access in the source
# stays one instruction, as with nvcc. Not in the AddressSanitizer tree (the
# two instrumentations do not mix): there the profiler counts no accesses.
ifneq ($(SANITIZE),1)
  PROF_FLAGS := -fsanitize=thread --param tsan-instrument-func-entry-exit=0 -fno-tree-vectorize -fno-tree-slp-vectorize
endif

# The tree's C++ objects remember the flags they were made with
# ($(BUILD)/cxx-flags-<hash>, like the nvcc stamp below): make test's
# CPU-only tree followed by a plain make (CUDA on) recompiles them rather
# than linking objects built without EMBER_CUDA into a CUDA build.
CXX_STAMP := $(BUILD)/cxx-flags-$(shell printf '%s' '$(CXX) $(CPPFLAGS) $(OPT) $(OPT_TESTS) $(OPT_KERNELS) $(SIMFLAGS)' | cksum | cut -d' ' -f1)
$(CXX_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/cxx-flags-* && touch $@

# A bare `make` builds `all`, not the first rule above (the flags stamp).
.DEFAULT_GOAL := all

# ----------------------------------------------------------------- sources
CORE_SRC  := $(wildcard engine/*.cpp ops/*.cpp ops/cpu/*.cpp ops/cpu/gemm/*.cpp ops/cpu/conv/*.cpp net/*.cpp net/dist/*.cpp data/*.cpp)
CU_SRC    := $(wildcard cuda/*.cu cuda/kernels/*.cu cuda/lab/*.cu)
CUDNN_SRC := $(if $(filter 1,$(CUDNN)),$(wildcard cuda/cudnn/*.cu))
NCCL_SRC  := $(if $(filter 1,$(NCCL)),$(wildcard cuda/nccl/*.cu))
SIMRT_SRC := $(wildcard cuda/sim/*.cpp cuda/sim/*.S)
# apps/: a user program is apps/<name>.cpp, or apps/<name>/<name>.cpp with
# the helpers only it uses beside it (predict, plot_metrics); the benchmark
# and lab programs are apps/bench/<name>.cpp. apps/training/ is the library
# every program links: the fit loop, flags, settings, checkpoints.
APP_LIB_SRC := $(wildcard apps/training/*.cpp)
APP_DIRS  := predict plot_metrics
APP_MAINS := $(wildcard apps/*.cpp) $(foreach d,$(APP_DIRS),apps/$(d)/$(d).cpp) $(wildcard apps/bench/*.cpp)
APP_HELPER_SRC := $(filter-out $(APP_MAINS),$(foreach d,$(APP_DIRS),$(wildcard apps/$(d)/*.cpp)))
APPS      := $(foreach m,$(APP_MAINS),$(BUILD)/$(basename $(notdir $(m))))
# The doctest suites, arranged like the sources they test (tests/engine,
# tests/ops, tests/data, ...); tests/support holds the harness. tests/cuda
# holds the CUDA backend's tests: those compiled in every build are listed in
# TEST_CUDA_ANY, the rest need CUDA=1.
TEST_CUDA_ANY := tests/cuda/test_cuda_memory.cpp tests/cuda/test_cuda_ptx.cpp tests/cuda/test_cuda_sources.cpp \
                 tests/cuda/test_cudnn_algorithm_cache_file.cpp
TEST_SRC  := $(sort $(shell find tests -name '*.cpp' -not -path 'tests/cuda/*' -not -path 'tests/sim/*' -not -path 'tests/fuzz/*') $(TEST_CUDA_ANY))
TEST_CUDA_SRC := $(filter-out $(TEST_CUDA_ANY),$(wildcard tests/cuda/*.cpp))
# The data and communication suites alone (a quick sanitizer run of the
# parsers of untrusted input: make BUILD=build-asan SANITIZE=1 CUDA=0 build-asan/test_data).
TEST_DATA_SRC := tests/support/test_main.cpp tests/support/kernel_coverage.cpp tests/data/test_records.cpp tests/data/test_image.cpp \
                 tests/data/test_im2rec.cpp tests/data/test_image_loader.cpp tests/net/dist/test_comm.cpp
TEST_SIM_SRC  := tests/support/test_main.cpp tests/support/kernel_coverage.cpp tests/support/op_harness.cpp tests/ops/test_ops.cpp \
                 $(TEST_CUDA_SRC) $(wildcard tests/sim/*.cpp)

obj     = $(patsubst %,$(BUILD)/obj/%.o,$(1))
simobj  = $(patsubst %,$(BUILD)/obj-sim/%.o,$(1))
profobj = $(patsubst %,$(BUILD)/obj-simprof/%.o,$(1))
KERNEL_SRC := $(wildcard cuda/kernels/*.cu cuda/lab/*.cu)
CORE_LIB  := $(BUILD)/libember.a
CUDA_LIB  := $(BUILD)/libember_cuda.a
SIM_LIB   := $(BUILD)/libember_cudasim.a
SIM_PROF_LIB := $(BUILD)/libember_cudasim_profile.a
LIBS      := $(CORE_LIB) $(if $(filter 1,$(CUDA)),$(CUDA_LIB))
TEST_BIN  := $(BUILD)/test_ember
SIM_TEST_BIN := $(if $(filter 1,$(SIM)),$(BUILD)/test_sim)
SIM_TOOLS := $(if $(filter 1,$(SIM)),$(BUILD)/bench_cudasim $(BUILD)/kernel_lab_sim $(BUILD)/train_resnet_sim)
TEST_OBJ  := $(call obj,$(TEST_SRC) $(if $(filter 1,$(CUDA)),$(TEST_CUDA_SRC)))
SIM_TEST_OBJ := $(call simobj,$(TEST_SIM_SRC))
# TEST_OBJ_FROM=build (make test's sanitizer tree): link the test code that
# tree already compiled instead of compiling it again — the product code is
# what the sanitizers instrument; the tests' own code is compiled once, plain
# (half of this tree's compile time otherwise). The test sources whose code
# depends on EMBER_CUDA are compiled here, for this tree's CUDA setting.
# (Not the emulator suite's: cuda/sim/cudasim.h, which its kernels include,
# poisons and unpoisons shared memory when __SANITIZE_ADDRESS__ is defined,
# so its test code must be compiled with the sanitizer it runs under.)
TEST_CUDA_DEPENDENT := tests/support/op_harness.cpp tests/ops/test_ops.cpp tests/cuda/test_cuda_memory.cpp
ifdef TEST_OBJ_FROM
  TEST_OBJ := $(patsubst %,$(TEST_OBJ_FROM)/obj/%.o,$(filter-out $(TEST_CUDA_DEPENDENT),$(TEST_SRC))) \
              $(call obj,$(filter $(TEST_CUDA_DEPENDENT),$(TEST_SRC)) $(if $(filter 1,$(CUDA)),$(TEST_CUDA_SRC)))
endif

.PHONY: all info deps torch-deps test test-build check train clean
all: info $(LIBS) $(APPS) $(TEST_BIN) $(SIM_TEST_BIN) $(SIM_TOOLS)

NO_GPU_NOTE := : no GPU here, so make test and make train skip nvcc; make and make check compile cuda/
info:
	@echo "ember build: $(CXX) $$($(CXX) -dumpfullversion) | flags $(OPT) -fopenmp"
	@echo "  nvcc : $(if $(NVCC_PATH),$(NVCC_PATH) ($(shell $(NVCC_PATH) --version 2>/dev/null | grep -o 'release [0-9.]*')),not found)"
	@echo "  CUDA : $(if $(filter 1,$(CUDA)),building cuda/ for sm $(CUDA_ARCH),off (CPU-only build$(if $(NO_GPU_HERE),$(NO_GPU_NOTE))))"
	@echo "  cuDNN: $(if $(CUDNN_H),$(CUDNN_H)$(if $(filter 1,$(CUDNN)),, (not used)),not found)"
	@echo "  NCCL : $(if $(NCCL_H),$(NCCL_H)$(if $(filter 1,$(NCCL)),, (not used)),not found)"
	@echo "  sim  : $(if $(filter 1,$(SIM)),CUDA emulator (cuda/sim) for the kernel tests,off (no cuda_runtime.h))"
	@echo "  JPEG : $(if $(filter turbo,$(JPEG)),libjpeg-turbo $(shell grep -ho 'LIBJPEG_TURBO_VERSION *[0-9.]*' $(JPEG_TURBO_H) 2>/dev/null | grep -o '[0-9.]*$$') (stb_image for other formats),stb_image$(if $(JPEG_TURBO_H),, (libjpeg-turbo not found: make deps installs libjpeg62-turbo-dev)))"

# Debian packages the build, the tests and `make train` need; installed only when absent
# (libjpeg62-turbo-dev: libjpeg-turbo's libjpeg API, the JPEG codec; librsvg2-bin: rsvg-convert, which the plot_metrics test renders its SVG with).
DEB_PACKAGES := libstb-dev libjpeg62-turbo-dev doctest-dev zlib1g-dev dataset-fashion-mnist openmpi-bin iproute2 librsvg2-bin
# The PyTorch side of the parity tests and of the fixture generators (never
# needed by the product): `make torch-deps` installs it; `make deps` adds
# torchvision by itself only where Debian's python3-torch is installed
# already (a small package then, and the full-size parity tests run).
TORCH_PACKAGES := python3-torch python3-torchvision python3-pil
HAVE_TORCH := $(shell dpkg-query -W -f='$${Status}' python3-torch 2>/dev/null | grep -q "install ok installed" && echo 1)
DEPS_PACKAGES := $(DEB_PACKAGES) $(if $(HAVE_TORCH),python3-torchvision)
torch-deps:
	@$(MAKE) --no-print-directory deps DEPS_PACKAGES="$(DEB_PACKAGES) $(TORCH_PACKAGES)"
deps:
	@missing=""; for p in $(DEPS_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi

# Every test source sees tests/support/doctest_config.h first (doctest prints char
# pointers as text; doctest and the standard headers the tests use); changing
# that header rebuilds them all.
TEST_INCLUDE := -include tests/support/doctest_config.h
$(call obj,$(TEST_SRC) $(TEST_CUDA_SRC)) $(call simobj,$(TEST_SIM_SRC)): tests/support/doctest_config.h
# The tree's own test objects read that header precompiled: $(BUILD)/pch/
# holds a copy and its .gch, made with the test objects' flags, and comes
# first on their include path, so each test source skips parsing doctest and
# the standard headers (1-3 s of its 3-20). Where the .gch does not fit the
# flags, g++ reads the copy beside it instead. The emulator suite's test
# objects (other defines) have their own, $(BUILD)/pch-sim/.
PCH_DIR := $(BUILD)/pch
PCH     := $(PCH_DIR)/doctest_config.h.gch
PCH_SIM_DIR := $(BUILD)/pch-sim
PCH_SIM := $(PCH_SIM_DIR)/doctest_config.h.gch
$(BUILD)/obj-sim/tests/%: CXXFLAGS += -I$(PCH_SIM_DIR) -include doctest_config.h
$(call simobj,$(TEST_SIM_SRC)): $(PCH_SIM)
$(PCH_SIM_DIR)/doctest_config.h: tests/support/doctest_config.h
	@mkdir -p $(dir $@)
	cp $< $@
$(PCH_SIM): $(PCH_SIM_DIR)/doctest_config.h $(CXX_STAMP)
	$(CXX) -I. -MMD -MP -DEMBER_CUDASIM=1 -I$(CUDA_HOME)/include -std=c++20 $(OPT_TESTS) -fopenmp $(WARN) -x c++-header $< -o $@
$(BUILD)/obj/tests/%: CPPFLAGS += -I$(PCH_DIR) -include doctest_config.h
$(call obj,$(TEST_SRC) $(TEST_CUDA_SRC)): $(PCH)
$(PCH_DIR)/doctest_config.h: tests/support/doctest_config.h
	@mkdir -p $(dir $@)
	cp $< $@
$(PCH): $(PCH_DIR)/doctest_config.h $(CXX_STAMP)
	$(CXX) -I. -MMD -MP $(filter -D%,$(CPPFLAGS)) $(filter -I$(CUDA_HOME)/include,$(CPPFLAGS)) -std=c++20 $(OPT_TESTS) -fopenmp $(WARN) -x c++-header $< -o $@

$(BUILD)/obj/%.cpp.o: %.cpp $(CXX_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) $(ISA_FLAGS) -c $< -o $@

# The GEMM's arithmetic, once per instruction set (ops/cpu/gemm/gemm_isa.h picks
# one at run time): these files override -march, whatever ARCH is.
ifeq ($(MACHINE),x86_64)
$(BUILD)/obj/ops/cpu/gemm/gemm_kernels_avx512.cpp.o: ISA_FLAGS := -march=x86-64-v4 -mprefer-vector-width=512
$(BUILD)/obj/ops/cpu/gemm/gemm_kernels_avx2.cpp.o: ISA_FLAGS := -march=x86-64-v3
$(BUILD)/obj/ops/cpu/gemm/gemm_kernels_portable.cpp.o: ISA_FLAGS := -march=x86-64
$(BUILD)/obj/ops/cpu/conv/conv_bf16_kernels_avx512.cpp.o: ISA_FLAGS := -march=x86-64-v4 -mavx512bf16 -mprefer-vector-width=512
$(BUILD)/obj/ops/cpu/elementwise_bf16_avx512.cpp.o: ISA_FLAGS := -march=x86-64-v4 -mprefer-vector-width=512
$(BUILD)/obj/ops/cpu/batch_norm_bf16_avx512.cpp.o: ISA_FLAGS := -march=x86-64-v4 -mprefer-vector-width=512
endif

$(BUILD)/obj/tests/%.o $(BUILD)/obj-sim/tests/%.o: OPT := $(OPT_TESTS)
ifeq ($(SANITIZE),1)
$(BUILD)/obj/ops/cpu/%.cpp.o $(BUILD)/obj/engine/half.cpp.o $(BUILD)/obj/engine/bfloat16.cpp.o \
  $(BUILD)/obj-sim/cuda/%.o: OPT := $(OPT_KERNELS)
endif

# The PTX of the newest architecture is kept as $(BUILD)/ptx/<file>.ptx (nvcc's
# intermediate, no extra compile; named <file>.compute_NN.ptx with several
# architectures, <file>.ptx with one): tests/cuda/test_cuda_ptx.cpp reads it.
# ptxas's resource report (-Xptxas -v: registers, spills, static shared
# memory per kernel and architecture) goes to $(BUILD)/ptx/<file>.ptxas.log,
# which the emulator's profiler reads (cuda/sim/kernel_resources.cpp); the
# rest of nvcc's messages (warnings, errors) still reach the terminal.
# The tree's CUDA objects remember the nvcc flags they were made with
# ($(BUILD)/nvcc-flags-<hash>): another CUDA_ARCH (make test builds for this
# machine's GPU only) recompiles them rather than linking a mix.
NVCC_STAMP := $(BUILD)/nvcc-flags-$(shell printf '%s' '$(NVCCFLAGS)' | cksum | cut -d' ' -f1)
$(NVCC_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/nvcc-flags-* && touch $@
$(BUILD)/obj/%.cu.o: %.cu $(NVCC_STAMP)
	@mkdir -p $(dir $@) $(dir $(BUILD)/ptx/$*) $(BUILD)/keep/$*
	$(NVCC) $(NVCCFLAGS) -DEMBER_CUDA=1 -keep -keep-dir $(BUILD)/keep/$* -Xptxas -v -c $< -o $@ \
	  2> $(BUILD)/ptx/$*.ptxas.log; status=$$?; \
	  grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' $(BUILD)/ptx/$*.ptxas.log >&2; exit $$status
	@kept=$(BUILD)/keep/$*/$(notdir $*); \
	  if [ -f $$kept.compute_$(PTX_ARCH).ptx ]; then mv $$kept.compute_$(PTX_ARCH).ptx $(BUILD)/ptx/$*.ptx; \
	  else mv $$kept.ptx $(BUILD)/ptx/$*.ptx; fi && rm -rf $(BUILD)/keep/$*

# Emulator objects: .cu through g++, and the tests of the CUDA backend
# compiled for the emulator (EMBER_CUDASIM instead of EMBER_CUDA).
$(BUILD)/obj-sim/%.cu.o: %.cu $(CXX_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) -I. -MMD -MP $(SIMFLAGS) $(CXXFLAGS) -c $< -o $@
$(BUILD)/obj-sim/tests/sim/profiler_kernels.cpp.o: CXXFLAGS += $(PROF_FLAGS)

# The profiler's copy of the kernels (obj-simprof): instrumented, they
# emulate at about half the speed, so the test suites keep the plain ones.
$(BUILD)/obj-simprof/%.cu.o: %.cu $(CXX_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) -I. -MMD -MP $(SIMFLAGS) $(CXXFLAGS) $(PROF_FLAGS) -c $< -o $@

$(BUILD)/obj-sim/%.S.o: %.S
	@mkdir -p $(dir $@)
	$(CXX) -I. -MMD -MP -c $< -o $@

$(BUILD)/obj-sim/%.cpp.o: %.cpp $(CXX_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) -I. -MMD -MP -DEMBER_CUDASIM=1 -I$(CUDA_HOME)/include $(CXXFLAGS) -c $< -o $@

$(CORE_LIB): $(call obj,$(CORE_SRC))
	@rm -f $@
	ar rcs $@ $^

$(CUDA_LIB): $(call obj,$(CU_SRC) $(CUDNN_SRC) $(NCCL_SRC))
	@rm -f $@
	ar rcs $@ $^

$(SIM_LIB): $(call simobj,$(CU_SRC) $(SIMRT_SRC))
	@rm -f $@
	ar rcs $@ $^

$(SIM_PROF_LIB): $(call profobj,$(KERNEL_SRC)) $(call simobj,$(filter-out $(KERNEL_SRC),$(CU_SRC)) $(SIMRT_SRC))
	@rm -f $@
	ar rcs $@ $^

# One link rule per program: build/<name> from its main, the training
# library, the program helpers and the engine's libraries.
define APP_RULE
$(BUILD)/$(basename $(notdir $(1))): $(call obj,$(1)) $(call obj,$(APP_LIB_SRC) $(APP_HELPER_SRC)) $$(LIBS)
	$$(CXX) $$(LDFLAGS) $$^ $$(LDLIBS) $$(CUDA_LDLIBS) -o $$@
endef
$(foreach m,$(APP_MAINS),$(eval $(call APP_RULE,$(m))))

$(TEST_BIN): $(TEST_OBJ) $(call obj,$(APP_LIB_SRC) $(APP_HELPER_SRC)) $(LIBS)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) $(CUDA_LDLIBS) -o $@

$(BUILD)/test_sim: $(SIM_TEST_OBJ) $(call obj,$(APP_LIB_SRC) $(APP_HELPER_SRC)) $(SIM_LIB) $(CORE_LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -ldl -o $@

$(BUILD)/test_data: $(call obj,$(TEST_DATA_SRC)) $(CORE_LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/bench_cudasim: $(call simobj,cuda/sim/tools/bench_cudasim.cpp) $(SIM_LIB) $(CORE_LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -ldl -o $@

# The training program on the emulator: --gpus 0 runs the GPU code path on
# the CPU (--conv native; the emulator has no cuDNN), so that a step's
# kernel launches and host waits can be counted without a GPU
# (--benchmark 1 --profile 1). Only the files that open the GPU differ from
# build/train_resnet's.
SIM_APP_SRC := apps/train_resnet.cpp apps/training/train_settings.cpp
$(BUILD)/train_resnet_sim: $(call simobj,$(SIM_APP_SRC)) $(call obj,$(filter-out $(SIM_APP_SRC),$(APP_LIB_SRC)) $(APP_HELPER_SRC)) $(SIM_LIB) $(CORE_LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -ldl -o $@

# apps/bench/kernel_lab.cpp on the emulator, with the profiler's instrumented kernels.
$(BUILD)/kernel_lab_sim: $(call simobj,apps/bench/kernel_lab.cpp) $(call obj,apps/training/flags.cpp) $(SIM_PROF_LIB) $(CORE_LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -ldl -o $@

# The sanitizer builds live in their own trees: AddressSanitizer + UBSan
# (the whole CPU suite, its programs and the emulator suite; CUDA off), and
# ThreadSanitizer for the threaded loader and packer tests (data/ and engine/
# instrumented, the rest of libember.a plain: it starts no threads there).
ASAN_BUILD := $(BUILD)-asan
TSAN_BUILD := $(BUILD)-tsan
NPROC := $(shell nproc 2>/dev/null || echo 2)
TSAN_SRC := $(wildcard engine/*.cpp data/*.cpp) tests/support/test_main.cpp tests/support/kernel_coverage.cpp \
            tests/data/test_image_loader.cpp tests/data/test_im2rec.cpp
TSAN_OBJ := $(patsubst %,$(TSAN_BUILD)/obj/%.o,$(TSAN_SRC))
$(TSAN_BUILD)/obj/%.cpp.o: %.cpp $(CXX_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(if $(filter tests/%,$<),$(TEST_INCLUDE)) -std=c++20 -O1 -g -fsanitize=thread -fopenmp $(WARN) -c $< -o $@
$(TSAN_BUILD)/test_loader: $(TSAN_OBJ) $(CORE_LIB)
	$(CXX) -fsanitize=thread -fopenmp $^ $(LDLIBS) -o $@

# Seconds each libFuzzer target runs in `make test` (make fuzz runs them longer).
FUZZ_CI_SECONDS ?= 10
# The long trainings the sanitizer run leaves to the plain one: under ASan
# each takes minutes (2-3 min for an integration run) repeating, step after
# step, kernels and code the shorter tests run under ASan too. Also the
# multi-process runs (dist process: ~60 s under ASan, mostly waiting for
# timeouts and child programs; the ring and rendezvous code they drive is
# checked in-process by the comm: tests) and the two model-zoo comparisons
# (~17 s, building ResNet-18/50 and reading their names and shapes).
ASAN_TEST_EXCLUDE := integration:*,finetune_resnet: features pretrained*,torchvision parity: predict*,data-parallel: 2 and 4 ranks*,dist process:*,resnet: parameter counts match*,resnet: torchvision*state_dict names*
# The emulator suite's whole trainings through fit() (a ResNet over several
# steps: ~2 of its 3-5 minutes) run once, plainly. The AddressSanitizer pass
# leaves out the longest (the graph replay against eager and a replayed
# step's launches, the multi-tensor ResNet, channels-last against NCHW,
# ResNet-50 steps' launch counts: ~5 minutes under ASan); shorter tests
# still drive their host code (StepGraph through the benchmark's replay, the
# multi-tensor plan, the layout conversions) and every kernel under ASan.
# The reverse schedule is about the order of threads between barriers
# inside kernels, which the kernels' own tests and the op harness cover: it
# leaves out every fit() training.
SIM_FIT_LONGEST := cuda graph step: fit()*,cuda graph step: a replayed step*,cuda multi-tensor step: a ResNet*,cuda channels-last: fit()*,cuda step launches:*
SIM_FIT_ALL := $(SIM_FIT_LONGEST),cuda graph step:*,cuda step launches:*,cuda host sync: fit()*,cuda upload ahead:*,cuda training: fit()*
# make test — the newcomer's check (at most 10 minutes on 2 cores from a
# fresh clone): the plain tree without the emulator's profiling tools
# (kernel_lab_sim, bench_cudasim: make builds them), the doctest suite with
# EMBER_QUICK=1 (GPU test cases skip without a device; the slow variants of
# end-to-end trainings skip with their reason, make check runs them), the
# CUDA kernels on the emulator once, and the commands of docs/guide.md. make
# test and make train build for this machine (LOCAL_CUDA): with a GPU, the
# CUDA code for its architecture only (LOCAL_CUDA_ARCH); without one, no
# nvcc at all (2 of make test's minutes on 2 cores, for code nothing here
# could run: the kernels are tested on the emulator, and make and make check
# compile cuda/ for every CUDA_ARCH; CUDA=1 on the command line keeps it).
GPU_ARCH  := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '.' | awk '$$1 >= 80')
LOCAL_CUDA_ARCH := $(or $(GPU_ARCH),$(lastword $(shell printf '%s\n' $(CUDA_ARCH) | sort -n)))
LOCAL_CUDA := $(if $(or $(GPU_ARCH),$(CUDA_CHOSEN)),$(CUDA),0)
LOCAL_BUILD := CUDA=$(LOCAL_CUDA) CUDA_ARCH="$(LOCAL_CUDA_ARCH)" $(if $(and $(NVCC_PATH),$(filter 0,$(LOCAL_CUDA))),NO_GPU_HERE=1)
# The emulator runs a kernel on one thread: its suites run as one shard per
# core side by side (tests/run_tests.sh "shards=N", every N-th test case
# each). The guide's commands mostly keep one core busy too: they start in
# the background ("& ...") and the emulator suite takes the other cores
# (58 s on 2 cores where one after the other took 77 s).
NPROC_BESIDE := $(shell echo $$(( $(NPROC) > 1 ? $(NPROC) - 1 : 1 )))
GUIDE_SUITE := $(if $(wildcard docs/guide.md),"& bash tests/docs/run_guide_commands.sh docs/guide.md")
SIM_SUITE    := $(if $(SIM_TEST_BIN),"shards=$(if $(GUIDE_SUITE),$(NPROC_BESIDE),$(NPROC)) $(SIM_TEST_BIN)")
# What a build leaves out is reported as skipped, with why (run_tests.sh
# "skipped: NAME: REASON"), not left uncounted.
NO_SIM_SUITE := $(if $(SIM_TEST_BIN),,"skipped: $(BUILD)/test_sim (the CUDA kernels on the emulator): no cuda_runtime.h under $(CUDA_HOME) (SIM=0)")
NO_CUDA_TESTS = $(if $(filter 1,$(1)),,"skipped: tests/cuda/ in $(TEST_BIN) (the CUDA backend on a GPU): $(2)")
NO_CUDA_WHY  := $(if $(NVCC_PATH),CUDA=0,no nvcc on the PATH)
NO_GPU_WHY   := $(if $(and $(NVCC_PATH),$(if $(GPU_ARCH)$(CUDA_CHOSEN),,1)),no GPU here: make test compiles no CUDA code (make check does),$(NO_CUDA_WHY))
QUICK_SUITES := "EMBER_QUICK=1 $(TEST_BIN)" $(GUIDE_SUITE) $(SIM_SUITE) $(NO_SIM_SUITE)
FULL_SUITES  := $(TEST_BIN) $(GUIDE_SUITE) $(SIM_SUITE) $(NO_SIM_SUITE)
# (The names are the sub-make's: with CUDA=0 LIBS has no CUDA library.)
test-build: info $(LIBS) $(APPS) $(TEST_BIN) $(SIM_TEST_BIN)
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) $(LOCAL_BUILD) test-build
	@bash tests/run_tests.sh $(QUICK_SUITES) $(call NO_CUDA_TESTS,$(LOCAL_CUDA),$(NO_GPU_WHY))

# make check — everything CI runs: everything make builds, make test's suites
# with the doctest suite in full (its slow variants too), the emulator again
# with CUDASIM_SCHEDULE=reverse, the whole CPU suite and the emulator suite
# under AddressSanitizer + UBSan, the threaded loader and packer tests under
# ThreadSanitizer, and every libFuzzer target for FUZZ_CI_SECONDS. It first
# builds the MXNet reference environment (make refs, ~20 s from PyPI) for the
# interop tests; where that fails they are skipped with the reason.
check: deps fuzz-deps
	@$(MAKE) --no-print-directory refs || echo "make check: no MXNet reference environment (see above): its interop tests are skipped"
	@$(MAKE) --no-print-directory -j$(NPROC) all $(TSAN_BUILD)/test_loader
	@$(MAKE) --no-print-directory -j$(NPROC) BUILD=$(ASAN_BUILD) SANITIZE=1 CUDA=0 TEST_OBJ_FROM=$(BUILD) \
	  $(ASAN_BUILD)/test_ember $(patsubst $(BUILD)/%,$(ASAN_BUILD)/%,$(APPS)) $(if $(filter 1,$(SIM)),$(ASAN_BUILD)/test_sim)
	@$(MAKE) --no-print-directory fuzz-build
	@bash tests/run_tests.sh $(FULL_SUITES) $(if $(filter 1,$(SIM)),"& shards=$(NPROC_BESIDE) $(ASAN_BUILD)/test_sim '-tce=$(SIM_FIT_LONGEST)'") \
	  "$(ASAN_BUILD)/test_ember '-tce=$(ASAN_TEST_EXCLUDE)'" \
	  $(if $(filter 1,$(SIM)),"shards=$(NPROC_BESIDE) CUDASIM_SCHEDULE=reverse $(BUILD)/test_sim '-tce=$(SIM_FIT_ALL)'") \
	  $(TSAN_BUILD)/test_loader "bash tests/fuzz/run_fuzz.sh --build $(FUZZ_BUILD) --seconds $(FUZZ_CI_SECONDS)" \
	  $(call NO_CUDA_TESTS,$(CUDA),$(NO_CUDA_WHY))

# make train — ResNet-20 on Fashion-MNIST, aiming at >= 92% in 10 minutes on 2 cores:
# fast.ai's one-cycle recipe (peak lr 0.4, momentum cycled 0.95 -> 0.85,
# label smoothing 0.1, batch 128) over TRAIN_EPOCHS epochs, with flips but
# no padded random crops (in 4 epochs the crops cost more than they give:
# 92.86% without, 92.07% with, docs/benchmarks.md#make-train-recipes),
# checkpoints under build/checkpoints/. It trains in fp32, the precision
# whose accuracy this recipe was measured with (92.92% in 9 min on an Ice
# Lake's 2 cores; a Zen 4 runs fp32 about twice as fast). On a CPU with
# AVX512-BF16, TRAIN_PRECISION=bf16 is 1.38x faster; the same accuracy was
# measured with the older 10-epoch recipe, not yet with this one.
# Only train_resnet is built.
TRAIN_EPOCHS ?= 4
TRAIN_PRECISION ?= fp32
TRAIN_ARGS ?=
train: deps
	@$(MAKE) --no-print-directory -j$(NPROC) $(LOCAL_BUILD) $(BUILD)/train_resnet
	$(BUILD)/train_resnet --network resnet --num-layers 20 --dataset fashion-mnist \
	  --num-epochs $(TRAIN_EPOCHS) --lr 0.4 --moms 0.95,0.85 --random-crop 0 --precision $(TRAIN_PRECISION) \
	  --model-prefix $(BUILD)/checkpoints/resnet20-fashion-mnist $(TRAIN_ARGS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)

-include $(shell find $(BUILD)/obj $(BUILD)/obj-sim $(BUILD)/obj-simprof $(BUILD)/pch $(BUILD)/pch-sim $(TSAN_BUILD)/obj -name '*.d' 2>/dev/null)

# libFuzzer targets of the parsers (make fuzz, make fuzz-ci).
include tests/fuzz/fuzz.mk

# The reference environment of the interop tests and comparison scripts
# (make refs: MXNet 1.9.1; make refs-torch: current PyTorch), never needed by
# the product.
include scripts/refs/refs.mk
