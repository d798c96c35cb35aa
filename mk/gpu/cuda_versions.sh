# Sourced by mk/gpu/run.sh, mk/gpu/bundle.sh and mk/gpu/env.sh: the CUDA versions a GPU machine's driver supports and a
# program needs, and the rule that decides whether the driver can run the program. CUDA's compatibility is by major
# version: a runtime of major N needs a driver that supports CUDA N or later (within a major, newer runtimes run on
# older drivers of the same major). One definition, so that the probe, the test step's failure and the bundle's check
# cannot disagree.

# The CUDA version the driver supports ("12.4"), from nvidia-smi's header (cudaDriverGetVersion's value); empty where
# nvidia-smi is missing or fails (no driver).
gpu_driver_cuda() { nvidia-smi 2>/dev/null | sed -nE 's/.*CUDA Version: *([0-9]+\.[0-9]+).*/\1/p' | head -n 1; }

# gpu_runtime_cuda_major PROGRAM: the major version of the CUDA runtime PROGRAM is linked against (libcudart.so.N:
# what cudaRuntimeGetVersion reports inside it), found or not on this machine; empty for a program without CUDA.
gpu_runtime_cuda_major() { ldd "$1" 2>/dev/null | sed -nE 's/.*libcudart\.so\.([0-9]+).*/\1/p' | head -n 1; }

# gpu_driver_too_old DRIVER RUNTIME_MAJOR: true when both are known and the driver's major is below the runtime's.
gpu_driver_too_old() { [ -n "$1" ] && [ -n "$2" ] && [ "${1%%.*}" -lt "$2" ]; }
