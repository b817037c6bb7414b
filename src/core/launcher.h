// launcher.h: was this process started as one of several by a parallel launcher (mpirun, srun)?
// Read from the launcher's environment only, before any MPI call, so that a plain `dpbench train`
// never initializes MPI (thread mode stays as it is):
//   OpenMPI mpirun:        OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK
//   PMIx (srun --mpi=pmix, prterun): PMIX_RANK (size from PMI_SIZE or SLURM_NTASKS when set)
//   PMI / PMI-2 (MPICH's hydra, srun --mpi=pmi2): PMI_SIZE, PMI_RANK
//   Slurm srun:            SLURM_NTASKS, SLURM_PROCID inside a job step (SLURM_STEP_ID set; a
//                          batch script's own shell has no step and is not a launch)
// The local rank (which GPU) comes from MPI itself after MPI_Init (collectives/mpi/mpi_transport.h).
#pragma once
#include <string>

namespace dpb {

struct LaunchEnv {
  bool processes = false;  // started by a launcher: one rank per process
  std::string source;      // which variables said so, for messages
  int size = 1;            // processes in the job (0: unknown until MPI_Init)
  int rank = 0;
};

// Throws dpb::Error naming the variable when one is set but is not a number.
LaunchEnv detect_launch_env();

}  // namespace dpb
