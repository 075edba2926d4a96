"""The job's MQTT receivers in a process of their own, beside Spark's: what `ksp-ingest`
runs (unless its receivers are shards on other machines).

    process = spawn(source_options(options))   # before Spark starts: they subscribe
    lower_priority()                            # this process, and so Spark's, yields the CPU
    ...                                         # Spark, the warm-up, the query
    stop(process)

Why apart: in a burst the receiver is what keeps pace with the broker, and the batches can
wait — a later batch takes more rows at once, at a lower cost per row. Inside Spark's Python
worker (where the `ksp_mqtt` source runs it otherwise) the receiver could not have more of
the CPU than the JVM: a process cannot raise its priority without privileges, only lower it,
and Spark's processes start from the job's. So the receivers start first, from the job's
process at its priority, and the job then lowers its own (`lower_priority`), which the JVM
and its workers inherit. On two cores a 200,000-reading burst then reached Parquet in
0.93-1.00 of a plain subscriber's time (docs/benchmarks.md, "Ingest"), where the batches had taken the receiver's CPU and run in more,
smaller batches.

The source's options go to the process on its standard input (the broker's password among
them: not on a command line, which any user can list). The receivers connect and subscribe at
once, so that what is published while Spark starts and warms up (`spark_ingest.warmup`) waits
in the buffer for the first batch; the process then reads its input to the end: the job's end
— a stop, or a `kill -9` — closes it, and the receivers stop (what they took is in the buffer,
acknowledged; what they had not is the broker's to send again).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading

__all__ = ["NICENESS", "lower_priority", "spawn", "stop"]

log = logging.getLogger("ksp.ingest")

#: How much lower than the receivers' Spark's priority is (`os.nice`'s increment).
NICENESS = 10


def spawn(options: dict[str, str]) -> subprocess.Popen:
    """Start the receivers the `ksp_mqtt` source `options` ask for, in a process of their own
    (`spark_ingest.mqtt.receivers`): they connect and subscribe at once. An earlier run's
    answer to the subscription is removed first, so that the job's wait for this run's
    (`Ingest.subscription`) cannot read it."""
    from .buffer import shard_directory
    from .mqtt import SUBSCRIBED

    shards = int(options.get("receivers", 1))
    for k in range(shards):
        (shard_directory(options["buffer"], k, shards) / SUBSCRIBED).unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE)
    assert process.stdin is not None
    process.stdin.write(json.dumps(options).encode() + b"\n")
    process.stdin.flush()
    return process


def stop(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Stop the receivers (what they hold goes into the buffer first) and wait for it."""
    if process.stdin is not None and not process.stdin.closed:
        try:
            process.stdin.close()
        except OSError:  # it is gone already
            pass
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("the receivers did not stop in %g s: killed", timeout)
        process.kill()
        process.wait()


def lower_priority(increment: int = NICENESS) -> None:
    """Lower this process's CPU priority (and so of the processes it starts after), where
    the system has priorities (`os.nice`)."""
    if hasattr(os, "nice"):
        os.nice(increment)


def main() -> int:
    # A Ctrl-C reaches the job's whole process group, a service manager's stop every process:
    # the job stops first, then closes the pipe, and this stops after it.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .mqtt import receivers

    line = sys.stdin.readline()
    if not line:  # the job ended before it sent the options
        return 0
    options = json.loads(line)
    running = receivers(options)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True,
                     name="parent").start()
    done.wait()
    for receiver in running:
        receiver.stop()
        receiver.buffer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
