#!/bin/sh
# Debian/Ubuntu packages the test suite needs beyond Python and g++: a real
# Slurm (slurmctld, slurmd, srun, sbatch) and munge for tests/test_slurm.py.
# The README's test command runs this first; it does nothing when they are
# already there, and uses sudo when not run as root.
set -e
missing=0
for program in slurmctld slurmd srun sbatch munged; do
    PATH="/usr/sbin:/usr/bin:$PATH" command -v "$program" >/dev/null 2>&1 || missing=1
done
[ "$missing" = 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
echo "installing slurmctld slurmd slurm-client munge (for tests/test_slurm.py)" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
