"""The machine's limits, measured in the same run as the libraries: single-thread memcpy bandwidth
(the yardstick of shared memory) and one iperf3 TCP stream on loopback (the yardstick of TCP);
and the cores' placement, measured around every launch: the cache-line round trip between CPUs."""
import json
import shutil
import socket
import subprocess
import time


def memcpy_gbps(memcpy_bin):
    """GB/s copied by one thread, 64 MiB buffers; None when the tool is missing or fails."""
    try:
        out = subprocess.run([memcpy_bin, str(64 << 20), "20"], capture_output=True, text=True,
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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iperf3_gbps(seconds=3):
    """GB/s (bytes) of one iperf3 stream over loopback; None without iperf3."""
    if not shutil.which("iperf3"):
        return None
    port = _free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # until the server listens (a probe would use up its one test)
            client = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t",
                                     str(seconds), "-J"], capture_output=True, text=True,
                                    timeout=seconds + 30)
            report = json.loads(client.stdout)
            if "end" in report and "sum_received" in report["end"]:
                return report["end"]["sum_received"]["bits_per_second"] / 8e9
            time.sleep(0.1)
        return None
    except (OSError, subprocess.SubprocessError, KeyError, ValueError):
        return None
    finally:
        server.kill()
        server.wait()
