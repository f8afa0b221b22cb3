# tests/fuzz/fuzz.mk — libFuzzer targets of ember's parsers of outside bytes
# (included from the Makefile). One binary per parser, tests/fuzz/fuzz_*.cpp,
# built with clang++ in their own tree ($(FUZZ_BUILD)), never mixed with the
# g++ objects:
#
#   make fuzz                 every target for FUZZ_SECONDS (default 600) each
#   make fuzz FUZZ_TARGETS="fuzz_json fuzz_idx" FUZZ_SECONDS=60
#   make fuzz-ci              every target for FUZZ_CI_SECONDS (10) against its committed corpus
#                             (what a submission must pass)
#   make fuzz-build           only build them
#   make fuzz-deps            install clang-14 and its fuzzer runtime (apt-get)
#   make fuzz-seeds           rewrite the seed corpora (tests/fuzz/make_seeds.cpp)
#
# Objects: the library sources with -fsanitize=fuzzer-no-link,address,undefined
# (coverage-instrumented, every UBSan finding fatal); the targets link with
# -fsanitize=fuzzer (libFuzzer's main). tests/fuzz/run_fuzz.sh runs them and
# prints one line per target; a crash's input lands in tests/fuzz/crashes/.

FUZZ_CXX     ?= clang++-14
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_JOBS    ?= 2
# Debian packages: clang++-14 (clang-14), libclang_rt.fuzzer/asan/ubsan
# (libclang-rt-14-dev) and the OpenMP runtime clang's -fopenmp links (libomp-14-dev).
FUZZ_PACKAGES := clang-14 libclang-rt-14-dev libomp-14-dev

# The build's codec choice (JPEG=turbo: the fuzzed decode is libjpeg-turbo's path).
FUZZ_DEFS     := $(filter -DEMBER_JPEG_TURBO=1,$(CPPFLAGS))
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CXXFLAGS := -std=c++20 -O1 -g -fopenmp -Wall -Wextra -Wno-pass-failed $(FUZZ_SAN)
# What the targets link: the parsers and the engine under them, compiled by
# clang with coverage and sanitizers ($(FUZZ_BUILD)/obj), and the code no
# outside byte reaches (ops/, and the layer and loss scaler an SGD needs, for the .states
# target) as the ordinary g++ objects of $(BUILD), uninstrumented: clang 14
# does not compile all of ops/ (f16/bf16 conversions, __builtin_cpu_supports
# "f16c"), the fuzzers run faster, and coverage counts parser code only.
# (The archive lends the linker only the objects a target calls into.)
FUZZ_LIB_SRC  := $(wildcard data/*.cpp) engine/autograd.cpp engine/bfloat16.cpp engine/file_io.cpp \
                 engine/memory.cpp engine/tensor.cpp net/json.cpp net/safetensors.cpp net/checkpoint.cpp net/mxnet_params.cpp \
                 net/module.cpp net/sgd.cpp apps/training/training_checkpoint.cpp apps/training/cpu_choices.cpp \
                 net/dist/frame.cpp net/dist/ring.cpp net/dist/buffer_math.cpp net/dist/socket.cpp \
                 net/dist/rendezvous.cpp net/dist/store.cpp
FUZZ_PLAIN_SRC := engine/half.cpp net/layers.cpp net/mixed_precision.cpp $(wildcard ops/*.cpp ops/cpu/*.cpp ops/cpu/gemm/*.cpp ops/cpu/conv/*.cpp)
FUZZ_SRC      := $(wildcard tests/fuzz/fuzz_*.cpp)
FUZZ_NAMES    := $(patsubst tests/fuzz/%.cpp,%,$(FUZZ_SRC))
FUZZ_BINS     := $(addprefix $(FUZZ_BUILD)/,$(FUZZ_NAMES))
FUZZ_TARGETS  ?= $(FUZZ_NAMES)
FUZZ_LIB      := $(FUZZ_BUILD)/libember_fuzz.a
fuzzobj        = $(patsubst %,$(FUZZ_BUILD)/obj/%.o,$(1))
.SECONDARY: $(call fuzzobj,$(FUZZ_SRC))

.PHONY: fuzz fuzz-ci fuzz-build fuzz-deps fuzz-check fuzz-seeds
fuzz-check:
	@command -v $(FUZZ_CXX) >/dev/null 2>&1 || { echo "fuzz: $(FUZZ_CXX) not found (Debian package clang-14; make fuzz-deps installs it)"; exit 1; }
	@f=$$($(FUZZ_CXX) -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null); [ -f "$$f" ] || \
	  f=$$($(FUZZ_CXX) -print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-x86_64.a; [ -f "$$f" ] || \
	  { echo "fuzz: libFuzzer (libclang_rt.fuzzer) not found (Debian package libclang-rt-14-dev; make fuzz-deps installs it)"; exit 1; }

fuzz-deps:
	@$(MAKE) --no-print-directory deps DEPS_PACKAGES="$(FUZZ_PACKAGES)"

fuzz-build: fuzz-check
	@$(MAKE) --no-print-directory $(if $(findstring j,$(MAKEFLAGS)),,-j$(NPROC)) $(FUZZ_BINS)

fuzz: fuzz-build
	@bash tests/fuzz/run_fuzz.sh --build $(FUZZ_BUILD) --seconds $(FUZZ_SECONDS) --jobs $(FUZZ_JOBS) $(FUZZ_TARGETS)

fuzz-ci: fuzz-build
	@bash tests/fuzz/run_fuzz.sh --build $(FUZZ_BUILD) --seconds $(FUZZ_CI_SECONDS) --jobs $(FUZZ_JOBS) $(FUZZ_NAMES)

$(FUZZ_BUILD)/obj/%.cpp.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) -I. -MMD -MP $(FUZZ_DEFS) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(call fuzzobj,$(FUZZ_LIB_SRC)) $(call obj,$(FUZZ_PLAIN_SRC))
	@rm -f $@
	ar rcs $@ $^

# (On a CUDA build the g++ objects call into cuda/: its library comes along.)
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.cpp.o $(FUZZ_LIB) $(if $(filter 1,$(CUDA)),$(CUDA_LIB))
	$(FUZZ_CXX) -fsanitize=fuzzer $(FUZZ_SAN) -fopenmp $^ $(LDLIBS) $(CUDA_LDLIBS) -o $@

# The seed corpora (tests/fuzz/corpus/<target>/seed-*), written by ember's own
# writers: a g++ program against the ordinary build.
fuzz-seeds: $(BUILD)/fuzz_make_seeds
	$(BUILD)/fuzz_make_seeds tests/fuzz/corpus

# The seed writer is a program, not a test: compiled outside $(BUILD)/obj/tests/,
# whose objects get the Makefile's forced doctest include (and then need
# doctest's implementation to link).
$(BUILD)/obj-tools/make_seeds.cpp.o: tests/fuzz/make_seeds.cpp $(CXX_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/fuzz_make_seeds: $(BUILD)/obj-tools/make_seeds.cpp.o $(BUILD)/obj/apps/training/training_checkpoint.cpp.o \
  $(BUILD)/obj/apps/training/cpu_choices.cpp.o $(LIBS)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) $(CUDA_LDLIBS) -o $@

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
-include $(wildcard $(BUILD)/obj-tools/*.d)
