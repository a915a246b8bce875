#!/bin/sh
# Debian/Ubuntu packages the test suite needs beyond Python and g++: a real
# Slurm (slurmctld, slurmd, srun, sbatch) and munge for tests/test_slurm.py,
# Java for the local Spark of tests/test_spark.py (PySpark 4 needs Java 17
# or later: openjdk-17-jre-headless, or the release's default JRE where 17 is
# gone), and Debian's Open MPI 4.1 for tests/test_other_mpis.py and
# tests/test_openmpi_abi.py (its mpirun.openmpi, mpicxx.openmpi and mpi.h). The README's test command runs this first; it does nothing when they
# are already there, and uses sudo when not run as root.
set -e
packages=""
for program in slurmctld slurmd srun sbatch munged; do
    PATH="/usr/sbin:/usr/bin:$PATH" command -v "$program" >/dev/null 2>&1 || \
        packages="slurmctld slurmd slurm-client munge"
done
command -v java >/dev/null 2>&1 || packages="$packages java"
[ -x /usr/bin/mpicxx.openmpi ] && [ -x /usr/bin/mpirun.openmpi ] || \
    packages="$packages openmpi-bin libopenmpi-dev"
packages="${packages# }"
[ -z "$packages" ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
echo "installing what the tests need: $packages (Slurm for tests/test_slurm.py, Java for" \
     "tests/test_spark.py, Open MPI 4.1 for tests/test_other_mpis.py)" >&2
$sudo apt-get update -qq
case "$packages" in *java*)
    if apt-cache show openjdk-17-jre-headless >/dev/null 2>&1; then jre=openjdk-17-jre-headless
    else jre=default-jre-headless; fi
    packages="$(echo "$packages" | sed "s/java/$jre/")" ;;
esac
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    $packages >/dev/null
