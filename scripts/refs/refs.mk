# scripts/refs/refs.mk — the reference environment: Python virtual
# environments, outside the product, holding the engines ember is compared
# with, installed from PyPI by exact version. The product never needs them;
# the interop tests (which skip, with their reason, where one is missing)
# and the side-by-side benchmark scripts use them. Included by the Makefile.
#
#   make refs        $(REFS_DIR)/mxnet: MXNet 1.9.1 (the last release, with
#                    MKL-DNN), the NumPy it imports with (it predates NumPy
#                    1.24's removals), OpenCV (mxnet.recordio.pack_img encodes
#                    with it) and safetensors: about 430 MB
#   make refs-torch  $(REFS_DIR)/torch: current PyTorch and torchvision (a few
#                    GB with their GPU libraries) and safetensors
#
# Two environments, not one: MXNet 1.9.1 needs a NumPy older than current
# PyTorch's. A stamp named after the package list marks a finished one, so a
# changed pin rebuilds it. Set REFS_DIR to put them elsewhere.
REFS_DIR ?= .refs
REFS_MXNET_PACKAGES := mxnet==1.9.1 numpy==1.23.5 opencv-python-headless==4.8.1.78 safetensors==0.4.5
REFS_TORCH_PACKAGES := torch==2.14.1 torchvision==0.29.2 safetensors==0.4.5
REFS_MXNET_IMPORT := import mxnet, numpy, cv2, safetensors; print('mxnet', mxnet.__version__, '| numpy', numpy.__version__, '| opencv', cv2.__version__)
REFS_TORCH_IMPORT := import torch, torchvision, safetensors; print('torch', torch.__version__, '| torchvision', torchvision.__version__)
refs_stamp = $(REFS_DIR)/$(1)/.ready-$(shell printf '%s' '$(2)' | cksum | cut -d' ' -f1)
REFS_MXNET_STAMP := $(call refs_stamp,mxnet,$(REFS_MXNET_PACKAGES))
REFS_TORCH_STAMP := $(call refs_stamp,torch,$(REFS_TORCH_PACKAGES))

# $(call make_refs_env,NAME,PACKAGES,IMPORT): a fresh venv, the packages, then
# an import of each as the check; one line naming what failed and the log.
define make_refs_env
	@command -v python3 >/dev/null || { echo "make refs: python3 is not installed (apt-get install python3 python3-venv)"; exit 1; }
	@rm -rf $(REFS_DIR)/$(1) && mkdir -p $(REFS_DIR)
	@echo "refs: creating $(REFS_DIR)/$(1) with $(2)"
	@python3 -m venv $(REFS_DIR)/$(1) > $(REFS_DIR)/$(1).log 2>&1 || { echo "make refs: python3 -m venv failed (Debian: apt-get install python3-venv); log: $(REFS_DIR)/$(1).log"; exit 1; }
	@$(REFS_DIR)/$(1)/bin/pip install --disable-pip-version-check -q $(2) >> $(REFS_DIR)/$(1).log 2>&1 || { echo "make refs: pip could not install $(2) into $(REFS_DIR)/$(1); log: $(REFS_DIR)/$(1).log"; exit 1; }
	@$(REFS_DIR)/$(1)/bin/python -c "$(3)" || { echo "make refs: $(REFS_DIR)/$(1) cannot import what it installed"; exit 1; }
	@touch $@
endef

.PHONY: refs refs-torch
refs: $(REFS_MXNET_STAMP)
	@echo "refs: $(REFS_DIR)/mxnet/bin/python is ready"
refs-torch: $(REFS_TORCH_STAMP)
	@echo "refs: $(REFS_DIR)/torch/bin/python is ready"
$(REFS_MXNET_STAMP):
	$(call make_refs_env,mxnet,$(REFS_MXNET_PACKAGES),$(REFS_MXNET_IMPORT))
$(REFS_TORCH_STAMP):
	$(call make_refs_env,torch,$(REFS_TORCH_PACKAGES),$(REFS_TORCH_IMPORT))
