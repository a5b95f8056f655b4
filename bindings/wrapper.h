/* The public Slurm API as installed on the build machine (libslurm-dev). */
#include <stdint.h>
#include <stdbool.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>
