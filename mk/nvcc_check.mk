# make test-nvcc (part of make test): every kernels/cuda/*.cu compiled, not run, by the installed nvcc with the real
# flags and warnings as errors (tests/nvcc_compile.sh); a machine without nvcc records one skip. The CPU build never
# runs nvcc (Makefile, "CUDA: built only when asked for"): this is the one place make test asks it.
.PHONY: test-nvcc
test-nvcc:
	@tests/nvcc_compile.sh '$(NVCC)' '$(NVCC_FLAGS) $(NVCC_DEFS)' $(CUDA_SRC)

# The flags of the real CUDA build (tests/e2e/test_nvcc_compile_check.sh compiles with them).
.PHONY: nvcc-print-flags
nvcc-print-flags:
	@echo '$(NVCC_FLAGS) $(NVCC_DEFS)'
