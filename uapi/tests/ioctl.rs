// SPDX-License-Identifier: GPL-2.0-only OR MIT

use core::mem::size_of;
use qhca_uapi::ioctl::*;
use qhca_uapi::*;

#[test]
fn query_device_number_is_iowr_of_its_struct() {
    let expect = iowr(
        QHCA_IOC_MAGIC,
        QHCA_IOC_NR_QUERY_DEVICE,
        size_of::<qhca_ioc_query_device>(),
    );
    assert_eq!(QHCA_IOCTL_QUERY_DEVICE, expect);
    // The formula written out once more, independently of the helpers.
    let by_hand = (3u32 << 30) | (160 << 16) | (0xCA << 8); // nr 0
    assert_eq!(QHCA_IOCTL_QUERY_DEVICE, by_hand);
    assert_eq!(QHCA_IOCTL_QUERY_DEVICE, 0xc0a0_ca00);
}

#[test]
fn decoding_recovers_the_fields() {
    let cmd = QHCA_IOCTL_QUERY_DEVICE;
    assert_eq!(ioc_dir(cmd), IOC_READ | IOC_WRITE);
    assert_eq!(ioc_type(cmd), QHCA_IOC_MAGIC);
    assert_eq!(ioc_nr(cmd), QHCA_IOC_NR_QUERY_DEVICE);
    assert_eq!(ioc_size(cmd) as usize, size_of::<qhca_ioc_query_device>());
}

#[test]
fn matches_well_known_linux_ioctls() {
    // Two numbers that are fixed Linux ABI on 64-bit hosts:
    // BLKGETSIZE64 = _IOR(0x12, 114, size_t), FS_IOC_GETFLAGS = _IOR('f', 1, long).
    assert_eq!(ioc(IOC_READ, 0x12, 114, 8), 0x8008_1272);
    assert_eq!(ioc(IOC_READ, b'f' as u32, 1, 8), 0x8008_6601);
    assert_eq!(ioc(IOC_NONE, 0, 0, 0), 0);
}

#[test]
#[should_panic(expected = "ioctl size does not fit")]
fn oversized_argument_is_rejected() {
    let _ = iowr(QHCA_IOC_MAGIC, 1, 1 << 14);
}

#[test]
fn unreliable_datagram_numbers() {
    assert_eq!(
        QHCA_IOCTL_CREATE_AH,
        iowr(
            QHCA_IOC_MAGIC,
            QHCA_IOC_NR_CREATE_AH,
            size_of::<qhca_ioc_create_ah>()
        )
    );
    assert_eq!(QHCA_IOCTL_CREATE_AH, 0xc030_ca10);
    // The number from before sgid_index: the same nr, the old size.
    assert_eq!(QHCA_IOCTL_CREATE_AH_V1, 0xc028_ca10);
    assert_eq!(ioc_nr(QHCA_IOCTL_CREATE_AH_V1), QHCA_IOC_NR_CREATE_AH);
    assert_eq!(
        QHCA_IOCTL_DESTROY_AH,
        iowr(
            QHCA_IOC_MAGIC,
            QHCA_IOC_NR_DESTROY_AH,
            size_of::<qhca_ioc_handle>()
        )
    );
    assert_eq!(QHCA_IOCTL_DESTROY_AH, 0xc010_ca11);
    assert_eq!(ioc_nr(QHCA_IOCTL_CREATE_AH), 0x10);
    assert_eq!(ioc_nr(QHCA_IOCTL_DESTROY_AH), 0x11);
}

#[test]
fn port_numbers() {
    assert_eq!(QHCA_IOCTL_QUERY_PORT, 0xc240_ca12);
    assert_eq!(
        ioc_size(QHCA_IOCTL_QUERY_PORT) as usize,
        size_of::<qhca_ioc_query_port>()
    );
    assert_eq!(QHCA_IOCTL_SET_GID, 0xc028_ca13);
    assert_eq!(
        ioc_size(QHCA_IOCTL_SET_GID) as usize,
        size_of::<qhca_ioc_set_gid>()
    );
}

#[test]
fn query_ctx_grew_and_kept_its_old_number() {
    assert_eq!(QHCA_IOCTL_QUERY_CTX, 0xc070_ca0b);
    assert_eq!(
        ioc_size(QHCA_IOCTL_QUERY_CTX) as usize,
        size_of::<qhca_ioc_query_ctx>()
    );
    assert_eq!(QHCA_IOCTL_QUERY_CTX_V1, 0xc050_ca0b);
    assert_eq!(
        QHCA_IOCTL_QUERY_CTX_V1,
        iowr(QHCA_IOC_MAGIC, QHCA_IOC_NR_QUERY_CTX, 80)
    );
    assert_eq!(
        ioc_size(QHCA_IOCTL_QUERY_CTX_V1) as usize,
        QUERY_CTX_V1_SIZE
    );
    assert_eq!(
        ioc_nr(QHCA_IOCTL_QUERY_CTX_V1),
        ioc_nr(QHCA_IOCTL_QUERY_CTX)
    );
}

#[test]
fn every_number_is_distinct() {
    let all = [
        QHCA_IOCTL_QUERY_DEVICE,
        QHCA_IOCTL_ALLOC_PD,
        QHCA_IOCTL_DEALLOC_PD,
        QHCA_IOCTL_REG_MR,
        QHCA_IOCTL_DEREG_MR,
        QHCA_IOCTL_CREATE_CQ,
        QHCA_IOCTL_DESTROY_CQ,
        QHCA_IOCTL_CREATE_QP,
        QHCA_IOCTL_MODIFY_QP,
        QHCA_IOCTL_QUERY_QP,
        QHCA_IOCTL_DESTROY_QP,
        QHCA_IOCTL_QUERY_CTX,
        QHCA_IOCTL_GET_ASYNC_EVENT,
        QHCA_IOCTL_ADVISE_MR,
        QHCA_IOCTL_ALLOC_MW,
        QHCA_IOCTL_DEALLOC_MW,
        QHCA_IOCTL_CREATE_AH,
        QHCA_IOCTL_DESTROY_AH,
    ];
    for (i, a) in all.iter().enumerate() {
        // One nr each, in order: the table above is the header's, nr 0x00..=0x11.
        assert_eq!(ioc_nr(*a) as usize, i, "{a:#x}");
        assert_eq!(ioc_type(*a), QHCA_IOC_MAGIC);
    }
}
