# The devices of the fuzzing build (scripts/fuzz.sh: --without-default-features
# --without-default-devices --with-devices-x86_64=qhca-fuzz, this file linked in as
# configs/devices/x86_64-softmmu/qhca-fuzz.mak): the machine the fuzz target starts
# (generic-fuzz-qhca.h: q35) and the device. Nothing of virtme-ng's: 9p needs virtfs, which
# --without-default-features leaves out.
CONFIG_Q35=y
CONFIG_QHCA=y
