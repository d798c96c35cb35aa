# CPU backend (kernels/cpu): OpenMP threads wait passively (sleep) between parallel regions. With libgomp's default
# active spinning, a waiting thread burns the core its partner or another process needs whenever the cores are
# shared (several runs at once, other load): measured on the 2-core dev machine under load, a MoEUT tiny train step
# with 2 threads ran ~10x slower spinning than passive (711 vs 8205 tokens/s; 1 thread: 5421). The variable must be
# in the environment before the program starts (libgomp reads it at load time), hence an export here; a value
# already in the environment wins.
export OMP_WAIT_POLICY ?= passive
