#!/usr/bin/env bash
# Boots the guest kernel under our QEMU with virtme-ng and runs a command in it.
#
#   scripts/vm.sh [--cpus N] [--uars N] [--iommu] [--append KERNEL_ARGS]
#                 [--link LOCALPORT:REMOTEPORT | --nic] [--node N | --mac MAC]
#                 [--qhca-port] [--qhca-stream SOCKET] [--qhca2 PROPS] [--qhca3 PROPS] [--dump FILE]
#                 [--link-control]
#                 [--] COMMAND...
#
# The guest sees the host's root filesystem (read-only) and this repository; /tmp/qhca-vm is
# shared read-write for results. Needs KDIR and QEMU in the environment (scripts/build-all.sh sets
# them) or builds them first. Uses TCG: nested KVM on our CI machines hangs the guest at
# "Decompressing Linux", so KVM is used only when QHCA_KVM=1. QHCA_QEMU_OPTS adds QEMU options (e.g. the
# -trace options of qemu-device/docs/specs/qhca.rst, "Tracing one message"). --cpus N gives the guest N
# vCPUs (default 2).
#
# virtme-ng talks to the guest through six virtio-serial-pci devices of 31 ports each, and QEMU gives
# every virtqueue of them an ioeventfd: 392 eventfds that QEMU's main loop polls on every turn
# (ppoll was 70 % of a receiving main loop's samples in a pair bench), and everything that waits
# for the main loop (a frame from the other guest, a bottom half, a command's completion) waited
# for that. vm.sh turns ioeventfd off for virtio-serial-pci (its few messages are handled in the
# vCPU that writes them); measured on two guests over the dgram link: ib_write_lat 64 B 188 -> 53
# us, ib_write_bw 64 KiB 67 -> 272 MiB/s.
#
# --link joins the guest to an Ethernet segment shared with other QEMU processes on this host
# (scripts/vm-pair.sh boots two such guests). In this QEMU: hub 0, joined to a dgram netdev that
# sends to 127.0.0.1:REMOTEPORT and receives on 127.0.0.1:LOCALPORT (UDP, one Ethernet frame a
# datagram), and a virtio-net-pci NIC on the hub with MAC 52:54:00:12:34:NN (NN = --node N in two
# hex digits; default node 1) or --mac MAC. The guest gets QHCA_NET_MAC=MAC (and QHCA_NODE=N with
# --node) in its environment; virtme-ng configures nothing on this NIC (it adds no NIC of its own
# and runs no DHCP without its --network option, which we never pass): scripts/guest-net.sh finds it
# by that MAC and sets its address. --qhca-port (with --link) adds a free port "qhcaport" on hub 0
# and appends netdev=qhcaport,mac=QMAC to the -device qhca option, putting the HCA's own Ethernet
# port on the same segment; QMAC is the NIC's MAC with its fifth byte plus one (52:54:00:12:35:NN),
# since QEMU's default MAC is the same in every QEMU process. Only for a device that accepts these
# properties. --qhca-stream SOCKET (with --qhca-port and --link) puts the first HCA's port on a
# link of its own instead of hub 0: a stream netdev over the Unix socket SOCKET, which node 1
# (--node 1) listens on and any other node connects to (again every 100 ms until it can), a point
# to point cable between two guests' ports (--dump, --qhca2 and --qhca3 work as without it; the
# extra HCAs stay on hub 0); the guest gets QHCA_PORT_LINK=stream. It carries
# bursts of frames fastest between two QEMUs (QEMU reads up to 68 KiB of frames per turn of its
# main loop from a stream, one frame per turn from a datagram socket, and no NIC on a hub sees
# the port's frames), but the port no longer shares a segment with the guests' NICs (no rxe to
# qhca over it).
# --nic builds the same segment without the dgram uplink: the guest's NIC and the HCA's
# port (--qhca-port) meet on hub 0 inside this one QEMU, so that Linux's rxe on the NIC and qhca talk
# RoCEv2 to each other in one guest. --qhca2 PROPS (with --qhca-port) adds a second qhca device on
# the hub, with MAC 52:54:00:12:36:NN and the extra device properties PROPS (e.g. the x-loss-*
# ones; "-" for none); it is qhca1. --qhca3 PROPS (with --qhca2) adds a third, MAC
# 52:54:00:12:37:NN, qhca2. --dump FILE (with --qhca-port) records every frame the
# first HCA's port sends or receives in FILE (pcap; QEMU's filter-dump), the second's in FILE.2,
# the third's in FILE.3. --link-control (with --qhca-port) lets the guest pull the cable out: a
# virtio-serial port named qhca.link (QHCA_LINK_CONTROL=qhca.link in its environment) takes
# "set_link NAME on|off" and answers "ok" or "error: ..." once QEMU's set_link has run
# (scripts/qmp-link.py serves it through QMP); NAME "qhcaport" is the first HCA's port,
# "qhcaport2" and "qhcaport3" the others'. QHCA_LINK_RCVBUF sets the UDP socket's receive buffer (default 4 MiB; 0:
# the host's default; see link_rcvbuf below).
#
# --timeout S kills the guest (QEMU included) after S seconds: vm.sh then says so and exits 124.
# --console FILE keeps everything the guest kernel prints, from the first line of its boot, in FILE
# (vng's --verbose: the boot console, at loglevel 7, and vng's own progress; the guest command's
# stderr lands there too); when the guest fails or
# times out, vm.sh prints the last 40 lines of it, so that a boot that hangs can be read.
source "$(dirname "$0")/lib.sh"

usage="usage: scripts/vm.sh [--timeout S] [--console FILE] [--cpus N] [--uars N] [--iommu] [--append KERNEL_ARGS] [--link LOCALPORT:REMOTEPORT | --nic] [--node N | --mac MAC] [--qhca-port] [--qhca-stream SOCKET] [--qhca2 PROPS] [--qhca3 PROPS] [--dump FILE] [--link-control] [--] COMMAND..."
timeout="" console=""
cpus=2
uars=24
append=()
iommu=""
link="" nic="" node="" mac="" qhca_port="" qhca_stream="" qhca2="" qhca3="" dump="" link_control=""
while [ $# -gt 0 ]; do
	case "$1" in
	--timeout) timeout=$2; shift 2 ;;
	--console) console=$2; shift 2 ;;
	--cpus) cpus=$2; shift 2 ;;
	--uars) uars=$2; shift 2 ;;
	--append) append=(--append "$2"); shift 2 ;;
	--iommu) iommu=1; shift ;;
	--link) link=$2; shift 2 ;;
	--node) node=$2; shift 2 ;;
	--mac) mac=$2; shift 2 ;;
	--nic) nic=1; shift ;;
	--qhca-port) qhca_port=1; shift ;;
	--qhca-stream) qhca_stream=$2; shift 2 ;;
	--qhca2) qhca2=$2; shift 2 ;;
	--qhca3) qhca3=$2; shift 2 ;;
	--dump) dump=$2; shift 2 ;;
	--link-control) link_control=1; shift ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || die "$usage"
[ -z "$timeout" ] || [[ $timeout =~ ^[0-9]+$ ]] || die "--timeout wants seconds, not '$timeout'"
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus wants a number of vCPUs, not '$cpus'"
[ -n "$link" ] && nic=1
if [ -z "$nic" ] && [ -n "$node$mac$qhca_port" ]; then
	die "--node, --mac and --qhca-port need --link or --nic"
fi
if [ -z "$qhca_port" ] && [ -n "$qhca2$dump$link_control" ]; then
	die "--qhca2, --dump and --link-control need --qhca-port"
fi
[ -z "$qhca3" ] || [ -n "$qhca2" ] || die "--qhca3 needs --qhca2"
if [ -n "$qhca_stream" ] && { [ -z "$qhca_port" ] || [ -z "$link" ]; }; then
	die "--qhca-stream needs --qhca-port and --link"
fi
if [ -z "${KDIR:-}" ] || [ -z "${QEMU:-}" ]; then
	KDIR=$("$QHCA_ROOT/scripts/build-kernel.sh" | tail -n1)
	QEMU=$("$QHCA_ROOT/scripts/build-qemu.sh" | tail -n1)
fi
command -v udevadm >/dev/null || die "udev is not installed: without it vng loses the guest's exit code (scripts/setup-host.sh)"

kvm=(--disable-kvm)
[ "${QHCA_KVM:-0}" = 1 ] && kvm=()
mkdir -p /tmp/qhca-vm
# vng hands --exec to the guest's /bin/sh: quote each argument for it. Keep arguments to plain
# words (paths, numbers); bash's $'...' quoting of control characters means nothing to dash.
cmd=$(printf '%q ' "$@")
# --iommu: the guest IOMMU in front of the device (seed 003's second stage): the driver's DMA
# addresses become IOVAs and every device access is translated and checked by QEMU's VT-d model.
dev="-device qhca,num-uars=$uars"
if [ -n "$iommu" ]; then
	dev="-device intel-iommu,intremap=off $dev"
	append=(--append "intel_iommu=on iommu=strict ${append[1]:-}")
fi
# link_rcvbuf PORT BYTES: once QEMU has bound 127.0.0.1:PORT, gives that socket a BYTES receive
# buffer. QEMU's dgram netdev keeps the host's default (net.core.rmem_default, often 208 KiB, about
# 90 frames): a burst from the peer guest (rxe sends a 64 KiB write as 64 frames, and perftest keeps
# 128 writes in flight) overflows it while this QEMU's main loop waits for a host CPU, and the host
# drops frames (RcvbufErrors in /proc/net/snmp). QEMU sets no option for it and vng closes inherited
# descriptors, so the socket is taken from the running QEMU (pidfd_getfd, Linux 5.6; root) and
# SO_RCVBUFFORCE set on the copy. QHCA_LINK_RCVBUF=0 leaves the host's default.
link_rcvbuf() {
	python3 - "$1" "$2" <<'PY' || echo "qhca: warning: the receive buffer of UDP port $1 stays the host's default" >&2
import ctypes, os, socket, sys, time
port, size = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
def inode():
    with open("/proc/net/udp") as f:
        for line in list(f)[1:]:
            w = line.split()
            if int(w[1].split(":")[1], 16) == port:
                return w[9]
t0 = time.time()
while time.time() - t0 < 120:
    ino = inode()
    for pid in filter(str.isdigit, os.listdir("/proc")) if ino else []:
        try:
            fds = [fd for fd in os.listdir(f"/proc/{pid}/fd")
                   if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{ino}]"]
        except OSError:
            continue
        for fd in fds:
            pidfd = libc.syscall(434, int(pid), 0)  # pidfd_open
            dup = libc.syscall(438, pidfd, int(fd), 0) if pidfd >= 0 else -1  # pidfd_getfd
            if dup < 0:
                sys.exit(f"qhca: pidfd_getfd on QEMU (pid {pid}): {os.strerror(ctypes.get_errno())}")
            s = socket.socket(fileno=dup)
            s.setsockopt(socket.SOL_SOCKET, 33, size)  # SO_RCVBUFFORCE
            print(f"qhca: UDP 127.0.0.1:{port} (QEMU pid {pid}): receive buffer "
                  f"{s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)} bytes", file=sys.stderr)
            s.close()
            os.close(pidfd)
            sys.exit(0)
    time.sleep(0.2)
sys.exit(f"qhca: no process bound UDP port {port} within 120 s")
PY
}
# --link / --nic: the segment. Without them nothing changes (virtme-ng's own "-net none": no NIC).
net="" genv=""
if [ -n "$nic" ]; then
	if [ -z "$mac" ]; then
		if ! [[ ${node:-1} =~ ^[0-9]+$ ]] || [ "${node:-1}" -lt 1 ] || [ "${node:-1}" -gt 255 ]; then
			die "--node wants a number in 1..255, not '$node'"
		fi
		mac=$(printf '52:54:00:12:34:%02x' "${node:-1}")
	fi
	[[ $mac =~ ^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$ ]] || die "--mac wants xx:xx:xx:xx:xx:xx, not '$mac'"
	mac=${mac,,}
	# mac_plus N: the NIC's MAC with N added to its fifth byte.
	mac_plus() { printf '%s:%02x:%s' "${mac:0:11}" $(((16#${mac:12:2} + $1) % 256)) "${mac:15:2}"; }
	if [ -n "$link" ]; then
		[[ $link =~ ^([0-9]+):([0-9]+)$ ]] || die "--link wants LOCALPORT:REMOTEPORT, not '$link'"
		lport=${BASH_REMATCH[1]} rport=${BASH_REMATCH[2]}
		net="-netdev dgram,id=qhcalink,local.type=inet,local.host=127.0.0.1,local.port=$lport"
		net+=",remote.type=inet,remote.host=127.0.0.1,remote.port=$rport"
		net+=" -netdev hubport,id=qhcauplink,hubid=0,netdev=qhcalink "
	fi
	# romfile= : no boot ROM (nothing boots from the network, and -L has no efi-virtio.rom).
	net+="-netdev hubport,id=qhcanic,hubid=0 -device virtio-net-pci,netdev=qhcanic,mac=$mac,romfile="
	if [ -n "$qhca_port" ]; then
		if [ -z "$qhca_stream" ]; then
			net+=" -netdev hubport,id=qhcaport,hubid=0"
		elif [ "${node:-1}" = 1 ]; then
			rm -f "$qhca_stream"
			net+=" -netdev stream,id=qhcaport,server=on,addr.type=unix,addr.path=$qhca_stream"
			genv+="QHCA_PORT_LINK=stream "
		else
			net+=" -netdev stream,id=qhcaport,server=off,addr.type=unix,addr.path=$qhca_stream"
			net+=",reconnect-ms=100"
			genv+="QHCA_PORT_LINK=stream "
		fi
		dev+=",netdev=qhcaport,mac=$(mac_plus 1)"
		if [ -n "$dump" ]; then
			mkdir -p "$(dirname "$dump")" && rm -f "$dump"
			net+=" -object filter-dump,id=qhcadump,netdev=qhcaport,file=$dump"
		fi
		# extra_hca N PROPS: HCA number N (2 or 3) on the hub, with PROPS ("-": none).
		extra_hca() {
			net+=" -netdev hubport,id=qhcaport$1,hubid=0"
			dev+=" -device qhca,num-uars=$uars,netdev=qhcaport$1,mac=$(mac_plus "$1")"
			[ "$2" = - ] || dev+=",$2"
			if [ -n "$dump" ]; then
				rm -f "$dump.$1"
				net+=" -object filter-dump,id=qhcadump$1,netdev=qhcaport$1,file=$dump.$1"
			fi
		}
		[ -z "$qhca2" ] || extra_hca 2 "$qhca2"
		[ -z "$qhca3" ] || extra_hca 3 "$qhca3"
	fi
	genv+="QHCA_NET_MAC=$mac ${node:+QHCA_NODE=$node }"
	if [ -n "$link" ] && [ "${QHCA_LINK_RCVBUF:-4194304}" != 0 ]; then
		link_rcvbuf "$lport" "${QHCA_LINK_RCVBUF:-4194304}" &
	fi
fi
if [ -n "$link_control" ]; then
	ctl=$(mktemp -d /tmp/qhca-link.XXXXXX)
	net+=" -qmp unix:$ctl/qmp,server=on,wait=off"
	net+=" -chardev socket,id=qhcalinkc,path=$ctl/port,server=on,wait=off"
	net+=" -device virtio-serial-pci,id=qhcalinks"
	net+=" -device virtserialport,bus=qhcalinks.0,chardev=qhcalinkc,name=qhca.link"
	genv+="QHCA_LINK_CONTROL=qhca.link "
	# It ends when QEMU closes its sockets.
	"$QHCA_ROOT/scripts/qmp-link.py" "$ctl/qmp" "$ctl/port" &
fi
vng=(vng --run "$KDIR/arch/x86/boot/bzImage" "${kvm[@]}" --disable-microvm "${append[@]}"
	--qemu "$QEMU" --cpus "$cpus" --memory 2G --rwdir /tmp/qhca-vm
	--qemu-opts="-L /usr/share/qemu -L /usr/share/seabios -global virtio-serial-pci.ioeventfd=off $net $dev ${QHCA_QEMU_OPTS:-}"
	--exec "${genv}QHCA_EXPECT_NUM_UARS=$uars $cmd")
[ -n "$timeout$console$link_control" ] || exec "${vng[@]}"

# Under a time limit and/or with the console kept. timeout(1) runs the guest in a process group of
# its own and signals all of it (vng and QEMU); a guest that ignores SIGTERM is killed 10 s later.
limit=()
[ -z "$timeout" ] || limit=(timeout --kill-after=10 "$timeout")
rc=0
if [ -n "$console" ]; then
	mkdir -p "$(dirname "$console")"
	"${limit[@]}" "${vng[@]}" --verbose 2>"$console" || rc=$?
else
	"${limit[@]}" "${vng[@]}" || rc=$?
fi
[ -z "$link_control" ] || rm -rf "$ctl"
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
	echo "qhca: the guest ran for more than $timeout s and was killed" >&2
	rc=124
fi
if [ "$rc" != 0 ] && [ -n "$console" ]; then
	echo "qhca: the guest exited with $rc; the last 40 lines of its console ($console):" >&2
	tail -n 40 "$console" | sed 's/^/  | /' >&2
fi
exit "$rc"
