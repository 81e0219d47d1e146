# Shared by the MPI test scripts (sourced after tests/cli/common.sh): how to launch
# ranks as root on an oversubscribed machine, the test corpus, the run comparator.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI: -q keeps the launcher's banners out of stderr, --oversubscribe allows more
# ranks than cores. MPICH's mpirun needs neither. A launch that hangs ends in 300 s.
if mpirun --version 2>&1 | grep -q "Open MPI"; then MPIRUN="timeout 300 mpirun -q --oversubscribe"; else MPIRUN="timeout 300 mpirun"; fi
small_data
CLOSE="$PY $SRC/tests/mpi/runs_close.py"
