// launcher.h: was this process started as one of several by a parallel launcher (mpirun, srun)?
// Read from the launcher's environment only, before any MPI call, so that a plain `dpbench train`
// never initializes MPI (thread mode stays as it is):
//   OpenMPI mpirun:        OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK
//   PMIx (srun --mpi=pmix, prterun): PMIX_RANK (size from PMI_SIZE or SLURM_NTASKS when set)
//   PMI / PMI-2 (MPICH's hydra, srun --mpi=pmi2): PMI_SIZE, PMI_RANK
//   Slurm srun:            SLURM_NTASKS, SLURM_PROCID inside a job step (SLURM_STEP_ID set; a
//                          batch script's own shell has no step and is not a launch)
// The local rank (which GPU) comes from MPI itself after MPI_Init (collectives/mpi/mpi_transport.h).
// One process, whatever the launcher and its PMI (mpirun -np 1, srun -n 1 --mpi=pmix|pmi2|none),
// is not process mode: its ranks run as threads, and MPI is never initialized (Debian's Open MPI
// dies in MPI_Init under srun's pmi2 and none). Only a PMIx launch that gives no size at all
// (PMIX_RANK alone) is left for MPI_Init to tell; dpbench train then also runs one process's
// ranks as threads.
#pragma once
#include <string>

namespace dpb {

struct LaunchEnv {
  bool processes = false;  // started by a launcher as one of several: one rank per process
  std::string source;      // which variables named a launcher, for messages ("": none)
  int size = 1;            // processes in the job (0: unknown until MPI_Init)
  int rank = 0;
};

// Throws dpb::Error naming the variable when one is set but is not a number.
LaunchEnv detect_launch_env();

// A process rank's error line: "rank R: error: MSG", where MSG's own leading "rank R: " (the
// same rank; messages from below often name it) is not repeated.
std::string rank_error_message(int rank, const std::string& msg);

}  // namespace dpb
