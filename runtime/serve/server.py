"""uvicorn around the app, with a drain on SIGTERM/SIGINT instead of uvicorn's own shutdown.

uvicorn's shutdown closes the listening socket at the first signal, so a client arriving during
the drain sees "connection refused" rather than an answer, and it re-raises the signal after
exiting, so the process dies by it (exit status -15) instead of exiting 0. Here the first signal
only starts the app's drain (new requests: 503; in flight: finish), and the app stops the
server when the drain is over. A second signal aborts what is left and exits at once (through
the app's shutdown all the same, so the engine thread stops cleanly).
"""

from __future__ import annotations

import socket
from types import FrameType
from typing import Optional

import uvicorn
from starlette.applications import Starlette

from runtime.serve.app import ServerState


class DrainingServer(uvicorn.Server):
    def __init__(self, app: Starlette, log_level: str = "warning", access_log: bool = False) -> None:
        config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on",
                                timeout_graceful_shutdown=5, timeout_keep_alive=5)
        super().__init__(config)
        self.state: ServerState = app.state.server
        self.state.on_drained = self._stop

    def _stop(self) -> None:
        self.should_exit = True

    def handle_exit(self, sig: int, frame: Optional[FrameType]) -> None:
        if self.state.draining_since is None:
            self.state.begin_drain()
        else:  # a second signal: stop waiting, abort what is left, exit (still through shutdown)
            self.state.engine_loop.abort_all()
            self.should_exit = True


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (IPv4 or IPv6 as ``host`` says); port 0 picks a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
