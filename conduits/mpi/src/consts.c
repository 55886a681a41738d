/* MPI constants whose names the generated Rust bindings spell differently from one MPI
 * implementation to another: `MPI_WIN_UNIFIED` is a macro in Open MPI (value 0) and an
 * enumerator of `MPIR_Win_model` in MPICH (value 2). Compiled by build.rs with the MPI
 * library's own compiler wrapper, so the values are the library's. */
#include <mpi.h>

const int amnet_mpi_win_unified = MPI_WIN_UNIFIED;
