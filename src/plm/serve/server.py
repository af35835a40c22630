"""Running the app: in the foreground until Ctrl-C (``plm serve``), or on a thread beside other work.

The socket is bound before uvicorn starts, so that a port in use is one line and exit code 2
(uvicorn would log it and exit 1), and port 0 gives a free port whose number is known at once.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette

from plm.errors import PLMError

SHUTDOWN_GRACE = 30  # seconds a stopping server gives the requests in flight to finish


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (0: a free port), or a PLMError saying why there is none.

    Args:
        host: the address to bind (an IPv6 one has a colon).
        port: the port; 0 takes a free one.

    Returns:
        The listening socket.

    Raises:
        PLMError: the address cannot be bound (a port in use, an unknown host ...).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=1024)
    except OSError as error:
        raise PLMError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    # Its connections inherit it: an answer's body leaves at once rather than once the client acknowledges its
    # headers, which a client of a kept-alive connection delays by 40 ms (Nagle's algorithm against delayed ACKs;
    # asyncio sets it only on sockets made with IPPROTO_TCP, and create_server makes them with 0).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def address(sock: socket.socket) -> str:
    """The URL a listening socket is reached at.

    Args:
        sock: the socket.

    Returns:
        ``http://HOST:PORT`` (``http://[HOST]:PORT`` for IPv6).
    """
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def uvicorn_server(app: Starlette) -> uvicorn.Server:
    """A uvicorn server of ``app``, quiet but for warnings and errors.

    plm serve says what it serves, and an access log would slow it. A stopping server gives the requests in
    flight `SHUTDOWN_GRACE` seconds.

    Args:
        app: the app.

    Returns:
        The server, not started.
    """
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=SHUTDOWN_GRACE)
    return uvicorn.Server(config)


def serve(app: Starlette, sock: socket.socket) -> None:
    """Serve on ``sock`` until Ctrl-C, which ends it cleanly: no new connections, the requests in flight answered.

    Args:
        app: the app (see [`create_app`][plm.serve.app.create_app]).
        sock: a listening socket (see [`listen`][plm.serve.server.listen]).
    """
    try:
        uvicorn_server(app).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn raises the Ctrl-C it caught again, once it has shut down
        pass


class BackgroundServer:
    """Serve ``app`` on a thread, on a free loopback port, for the time of a ``with`` block.

    ``with BackgroundServer(app) as server:`` serves ``app`` at ``server.url`` and stops it, gracefully, on
    leaving the block. Entering raises a PLMError when the server does not start within ``start_timeout``.

    Args:
        app: the app.
        host: the address to listen on; the port is a free one.
        start_timeout: seconds to wait for the server to start.

    Raises:
        PLMError: ``host`` cannot be listened on.
    """

    def __init__(self, app: Starlette, host: str = "127.0.0.1", start_timeout: float = 30.0) -> None:
        self.sock = listen(host, 0)
        self.url = address(self.sock)
        self.server = uvicorn_server(app)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.start_timeout = start_timeout

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise PLMError(f"the server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()
