# Data-parallel training (pipeline/base/dist.c, model/training/dist_train.c, kernels/cuda/cuda_nccl.cu).
# The MPI compile and link flags are in the Makefile (every program's objects see mpi.h; only train links MPI).
# The cuda backend's gradient all-reduce is NCCL, linked where the Makefile found nccl.h (NCCL_HEADER; without it the
# CUDA objects are built with DMMATH_NO_NCCL and multi-rank CUDA runs are refused).
ifneq ($(NCCL_HEADER),)
ifdef CUDA_ENABLED
CUDA_LIBS += -Wl,--as-needed -lnccl -Wl,--no-as-needed # only train calls it
endif
endif
