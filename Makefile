# ember — one Makefile for everything.
#
#   make              build the library, the apps and the tests (CPU always,
#                     CUDA when nvcc is found); prints what it found
#   make test         install missing Debian packages, build, run the test suite
#   make train        install missing packages, build, train ResNet-20 on Fashion-MNIST
#   make deps         only install what is missing (apt-get, needs root)
#   make clean
#
# Toggles (Darknet style):  CUDA=0|1  (default: 1 when nvcc is on the PATH)
#                           CUDA_ARCH="80 90"   SM numbers for nvcc
#                           DEBUG=1   -O0 -g
#                           SANITIZE=1  AddressSanitizer + UBSan

CXX      ?= g++
BUILD    ?= build
CUDA_ARCH ?= 80 90

# ------------------------------------------------------------ what is here
NVCC_PATH := $(shell command -v nvcc 2>/dev/null)
ifeq ($(origin CUDA),undefined)
  CUDA := $(if $(NVCC_PATH),1,0)
endif
CUDA_HOME ?= $(if $(NVCC_PATH),$(patsubst %/bin/nvcc,%,$(NVCC_PATH)),/usr/local/cuda)
CUDNN_H   := $(firstword $(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h))
NCCL_H    := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))

# ------------------------------------------------------------------- flags
WARN     := -Wall -Wextra
ifeq ($(DEBUG),1)
  OPT    := -O0 -g
else
  OPT    := -O3 -march=native -g1
endif
ifeq ($(SANITIZE),1)
  OPT    += -fsanitize=address,undefined -fno-omit-frame-pointer
  LDSAN  := -fsanitize=address,undefined
endif
CPPFLAGS := -I. -MMD -MP
CXXFLAGS := -std=c++20 $(OPT) -fopenmp $(WARN)
LDFLAGS  := -fopenmp $(LDSAN)
LDLIBS   := -lz -lpthread

ifeq ($(CUDA),1)
  ifeq ($(NVCC_PATH),)
    $(error CUDA=1 but nvcc is not on the PATH)
  endif
  NVCC       := $(NVCC_PATH)
  GENCODE    := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
  NVCCFLAGS  := -std=c++20 -O3 $(GENCODE) -I. -MMD -MP -Xcompiler "$(WARN) -fopenmp" --expt-relaxed-constexpr
  CPPFLAGS   += -DEMBER_CUDA=1 -I$(CUDA_HOME)/include
  LDLIBS     += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
endif

# ----------------------------------------------------------------- sources
LIB_SRC   := $(wildcard engine/*.cpp ops/*.cpp ops/cpu/*.cpp net/*.cpp data/*.cpp)
CUDA_SRC  := $(if $(filter 1,$(CUDA)),$(wildcard cuda/*.cu))
APP_COMMON_SRC := $(wildcard apps/common/*.cpp)
APP_MAINS := $(wildcard apps/*.cpp)
APPS      := $(patsubst apps/%.cpp,$(BUILD)/%,$(APP_MAINS))
TEST_SRC  := $(wildcard tests/*.cpp)

obj = $(patsubst %,$(BUILD)/obj/%.o,$(1))
LIB_OBJ   := $(call obj,$(LIB_SRC)) $(call obj,$(CUDA_SRC))
APP_COMMON_OBJ := $(call obj,$(APP_COMMON_SRC))
TEST_OBJ  := $(call obj,$(TEST_SRC))
LIB       := $(BUILD)/libember.a
TEST_BIN  := $(BUILD)/test_ember

.PHONY: all info deps test train clean
all: info $(LIB) $(APPS) $(TEST_BIN)

info:
	@echo "ember build: $(CXX) $$($(CXX) -dumpfullversion) | flags $(OPT) -fopenmp"
	@echo "  nvcc : $(if $(NVCC_PATH),$(NVCC_PATH) ($(shell $(NVCC_PATH) --version 2>/dev/null | grep -o 'release [0-9.]*')),not found)"
	@echo "  CUDA : $(if $(filter 1,$(CUDA)),building cuda/ for sm $(CUDA_ARCH),off (CPU-only build))"
	@echo "  cuDNN: $(if $(CUDNN_H),$(CUDNN_H),not found)"
	@echo "  NCCL : $(if $(NCCL_H),$(NCCL_H),not found)"

# Debian packages the build, the tests and `make train` need; installed only when absent.
DEB_PACKAGES := libstb-dev doctest-dev zlib1g-dev dataset-fashion-mnist
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi

$(BUILD)/obj/%.cpp.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DEMBER_CUDA=1 -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%: $(BUILD)/obj/apps/%.cpp.o $(APP_COMMON_OBJ) $(LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(TEST_BIN): $(TEST_OBJ) $(APP_COMMON_OBJ) $(LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@

NPROC := $(shell nproc 2>/dev/null || echo 2)
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@bash tests/run_tests.sh $(TEST_BIN)

# Train ResNet-20 on Fashion-MNIST with the defaults of train_resnet,
# checkpointing every epoch under build/checkpoints/.
TRAIN_ARGS ?=
train: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	$(BUILD)/train_resnet --network resnet --num-layers 20 --dataset fashion-mnist \
	  --model-prefix $(BUILD)/checkpoints/resnet20-fashion-mnist $(TRAIN_ARGS)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
