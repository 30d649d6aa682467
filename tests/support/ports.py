"""Free ports on 127.0.0.1 for the servers the tests start."""
from __future__ import annotations

import socket


def free_ports(n: int = 1) -> list[int]:
    """``n`` distinct free ports, held open together while chosen: taken one at a time, the kernel may hand
    the same port out twice (the standalone master's UI then moved aside and the worker's answered for it)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port_run(n: int) -> int:
    """A free port whose ``n - 1`` next ones are free too: a server of several ports counted from one
    (scripts/kafka.sh's broker and controller, scripts/spark-cluster.sh's master, its UI and the workers' UIs)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for next_port in range(port + 1, port + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", next_port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no {n} free ports in a row on 127.0.0.1")

