# Not shipped: it names the simulator's tests sim.tests.* beside gpuarray's tests.*, so
# one pytest run takes both (the distribution gpuarray-sim is the package gpuarray_sim).
