"""The machine's limits, measured in the same run as the libraries: single-thread memcpy bandwidth
(the yardstick of shared memory), one iperf3 TCP stream on loopback (the yardstick of TCP), two
streams at once in opposite directions (what loopback carries each way when, as in a 2-rank
all-reduce, both directions share the cores) and n streams at once (what each link of an n-rank
ring carries when all n share the cores); and, measured around every launch, the cores' placement
(the cache-line round trip between CPUs) and the host's pace (a fixed loopback exchange)."""
import json
import os
import platform
import shutil
import socket
import subprocess
import time


def machine():
    """The CPU's model (lscpu), the CPUs and the load average now."""
    model = next((line.split(":", 1)[1].strip() for line in
                  subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                  if line.startswith("Model name")), platform.processor())
    return f"{model}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start"


def memcpy_gbps(memcpy_bin, size=64 << 20):
    """GB/s copied by one thread between two buffers of `size` bytes (64 MiB by default), at least
    256 MiB copied in all; None when the tool is missing or fails."""
    iters = max(20, (256 << 20) // max(1, size))
    try:
        out = subprocess.run([memcpy_bin, str(size), str(iters)], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        return float(out.strip().split(",")[2])
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None


def core_to_core_ns(tool):
    """The worst median cache-line round trip (ns) between CPU 0 and another CPU, about 20 ms of
    measuring; None when the tool is missing or fails."""
    try:
        out = subprocess.run([tool], capture_output=True, text=True, timeout=30,
                             check=True).stdout
        return float(out.strip().split(",")[1])
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None


PACE_RANKS, PACE_BYTES = 2, 2 << 20


def loopback_pace_us(tool):
    """The median pass (us) of the loopback exchange at 2 ranks and 2 MiB (loopback_footprint),
    about 0.1 s of measuring; None when the tool is missing or fails. The host's own pace: on a
    virtual machine the same work over loopback TCP runs up to 4x slower for seconds to minutes
    while a busy loop and the cores' round trip keep their speed, and every library's calls slow
    down with it."""
    try:
        out = subprocess.run([tool, str(PACE_RANKS), str(PACE_BYTES)], capture_output=True,
                             text=True, timeout=30, check=True).stdout
        return float(out.strip().split(",")[4])
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iperf3_client(port, seconds, reverse):
    args = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"]
    return subprocess.Popen(args + (["-R"] if reverse else []), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def _received_gbps(client, seconds):
    """The client's received GB/s (bytes), None where the server was not yet listening."""
    out, _ = client.communicate(timeout=seconds + 30)
    report = json.loads(out)
    if "end" in report and "sum_received" in report["end"]:
        return report["end"]["sum_received"]["bits_per_second"] / 8e9
    return None


def _iperf3(streams, seconds, opposite=False):
    """GB/s (bytes) each of `streams` loopback streams carried, all running at once, every second
    one in the opposite direction (iperf3 -R) if `opposite`; one server per stream. None without
    iperf3."""
    if not shutil.which("iperf3"):
        return None
    servers, clients = [], []
    try:
        ports = []
        for _ in range(streams):
            ports.append(_free_port())
            servers.append(subprocess.Popen(
                ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(ports[-1])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(50):  # until the servers listen (a probe would use up their one test)
            time.sleep(0.1)
            clients = [_iperf3_client(port, seconds, opposite and i % 2 == 1)
                       for i, port in enumerate(ports)]
            rates = [_received_gbps(c, seconds) for c in clients]
            clients = []
            if all(r is not None for r in rates):
                return rates
            if any(r is not None for r in rates):
                return None  # one ran alone: not the measurement asked for
        return None
    except (OSError, subprocess.SubprocessError, KeyError, ValueError):
        return None
    finally:
        for p in servers + clients:
            p.kill()
            p.wait()


def iperf3_gbps(seconds=3):
    """GB/s (bytes) of one iperf3 stream over loopback; None without iperf3."""
    rates = _iperf3(1, seconds)
    return rates[0] if rates else None


def iperf3_opposite_gbps(seconds=3):
    """GB/s (bytes) each way, the mean of two iperf3 streams over loopback running at once in
    opposite directions: a 2-rank all-reduce sends as many bytes each way at once, so on a host
    whose cores both streams share this, not one stream, bounds it. None without iperf3."""
    rates = _iperf3(2, seconds, opposite=True)
    return sum(rates) / 2 if rates else None


def iperf3_ring_gbps(streams, seconds=3):
    """GB/s (bytes) each way, the mean of `streams` iperf3 streams over loopback running at once:
    each rank of a ring all-reduce sends to the next as the others send to theirs, so on one host
    whose cores all the streams share, this bounds the ring's busbw before any reduction. None
    without iperf3."""
    rates = _iperf3(streams, seconds)
    return sum(rates) / streams if rates else None
