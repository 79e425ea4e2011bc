# Sourced by the scripts that start mnemo with the local model: the model's matrix library
# (candle) splits each matrix product over RAYON_NUM_THREADS threads, and without it reads
# /proc/cpuinfo at every product to count the cores. Told the model's own thread count, it does
# neither (see "Embedders" in the README).
export RAYON_NUM_THREADS="${RAYON_NUM_THREADS:-${MNEMO_EMBEDDING_THREADS:-1}}"
