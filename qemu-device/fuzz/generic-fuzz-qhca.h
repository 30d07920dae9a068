    /*
     * qhca (hw/misc/qhca): the registers (BAR0), the doorbell pages (BAR2)
     * and MSI-X, with every DMA the device makes (command and event rings,
     * page lists, WQEs, CQEs) answered with fuzz data.  Two small queues and
     * a few doorbell pages, so that the fuzzer reaches the commands and the
     * engine soon.  The firmware comes from the distribution (seabios; the
     * source package has none).  Inserted into
     * tests/qtest/fuzz/generic_fuzz_configs.h by scripts/fuzz.sh.
     */
    {
        .name = "qhca",
        .args = "-M q35 -nodefaults -L /usr/share/seabios "
                "-device qhca,num-uars=4,max-queue-log=4",
        .objects = "qhca*",
    },
