"""Time execute round trips against a local Jupyter (ipykernel) kernel.

Usage: python3 jupyter_rtt.py ITERATIONS WARMUP

Starts a kernel with jupyter_client, runs `x = 21`, then WARMUP untimed and
ITERATIONS timed executions of `x * 2`. A round trip is what a Jupyter
client waits for: from sending execute_request until both the execute_reply
and the kernel's return to idle (every output delivered) have arrived.
Prints one JSON object: {"samples_ns": [...], "kernel_rss_bytes": N}, where
the RSS is the idle kernel's (after the runs), read from /proc.
"""
import json
import os
import sys
import time

os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")

from jupyter_client.manager import start_new_kernel  # noqa: E402


def run(kc, code):
    msg_id = kc.execute(code, store_history=False)
    result = None
    idle = replied = False
    while not (idle and replied):
        if not idle:
            msg = kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "execute_result":
                result = msg["content"]["data"].get("text/plain")
            elif kind == "error":
                raise RuntimeError("%s: %s" % (msg["content"]["ename"], msg["content"]["evalue"]))
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        else:
            reply = kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                if reply["content"]["status"] != "ok":
                    raise RuntimeError("execute_reply status %s" % reply["content"]["status"])
                replied = True
    return result


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    iterations, warmup = int(sys.argv[1]), int(sys.argv[2])
    km, kc = start_new_kernel(kernel_name="python3", stderr=open(os.devnull, "w"))
    try:
        run(kc, "x = 21")
        for _ in range(warmup):
            run(kc, "x * 2")
        samples = []
        for _ in range(iterations):
            start = time.perf_counter_ns()
            got = run(kc, "x * 2")
            samples.append(time.perf_counter_ns() - start)
            if got != "42":
                raise RuntimeError("x * 2 gave %r" % got)
        pid = km.provisioner.process.pid if getattr(km, "provisioner", None) else km.kernel.pid
        print(json.dumps({"samples_ns": samples, "kernel_rss_bytes": rss(pid)}))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
