"""`kinetoscope serve`: the viewer in a web browser, through textual-serve (an optional extra:
`pip install 'kinetoscope[serve]'`).

For the machine that can open a port but has no terminal to spare. A small web server listens
on one address (127.0.0.1 unless `--host` says otherwise); each browser tab that opens its page
gets its own viewer process, `kinetoscope view ...` (or `diff`) run under Textual's web driver,
which draws into the page through a websocket. The page's websocket address is taken from the
address the browser used, so a page reached through an SSH tunnel (`ssh -L 9000:localhost:8000`)
works as well as a direct one.

The port is bound here, before anything is served: a busy port is one line, `--port 0` takes a
free one, and the line that says where it listens names the real port. Ctrl+C (or SIGTERM)
stops the server: each viewer gets SIGTERM (on which Textual's web driver quits), and one that
has not ended STOP_WAIT_S later is killed, so that no viewer process outlives it.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import Any

INSTALL = "pip install 'kinetoscope[serve]'"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
QUIT_WAIT_S = 1.0  # how long a session is waited for once its viewer has ended
STOP_WAIT_S = 5.0  # how long the viewers are given to quit, before SIGKILL
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
KILL = getattr(signal, "SIGKILL", signal.SIGTERM)  # for a viewer that would not quit


class ServeError(Exception):
    """The server cannot start; the message is one line for the user."""


def add_serve_command(sub: Any) -> None:
    """The `serve` subcommand (its handler is `run_serve_command`)."""
    from kinetoscope.cli import _positive

    serve = sub.add_parser(
        "serve",
        help="run the viewer in a web browser (needs the serve extra)",
        description="Serve the viewer to a web browser through textual-serve: open the address "
        "it prints. Each browser tab gets its own viewer. Needs the serve extra: " + INSTALL,
        epilog="Ctrl+C stops the server and its viewers. There is no password: anyone who can "
        "reach the address can open the viewer and read the trace, so it listens on this "
        "machine only (127.0.0.1) unless --host says otherwise; from another machine, prefer "
        "an SSH tunnel: ssh -L 8000:localhost:8000 HOST.",
    )
    serve.add_argument(
        "trace",
        nargs="+",
        help="a .json or .json.gz trace; or a job's folder, or several rank files, for the "
        "job viewer; with --diff: BASE and NEW",
    )
    serve.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"the address to listen on (default {DEFAULT_HOST}: this machine only; 0.0.0.0: "
        "every interface, with a warning)",
    )
    serve.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free port, printed)",
    )
    serve.add_argument(
        "--diff", action="store_true", help="serve the diff viewer of two traces, BASE and NEW"
    )
    serve.add_argument(
        "--cycle",
        type=_positive,
        metavar="N",
        help="a job's folder: view profiling cycle N (1 = the oldest)",
    )
    serve.set_defaults(handler=run_serve_command)


def _port(text: str) -> int:
    from kinetoscope.numbers import MAX_NUMBER_TEXT, shown

    if len(text) > MAX_NUMBER_TEXT:  # before int(): 5,000 digits are a ValueError of their own
        raise argparse.ArgumentTypeError(f"{shown(text)} is too long a port number")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {shown(text)}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port from 0 to 65535, not {value}")
    return value


def run_serve_command(args: argparse.Namespace) -> int:
    """`kinetoscope serve ...`: 0 when stopped by Ctrl+C or SIGTERM, 1 (one line on stderr)
    when it cannot start, 2 for a usage error."""
    from kinetoscope.cli import _error, _usage_error

    missing = missing_extra()
    if missing is not None:
        return _error(missing)
    try:
        command = viewer_command(args.trace, diff=args.diff, cycle=args.cycle)
    except ValueError as exc:  # the arguments do not fit together
        return _usage_error(str(exc))
    except ServeError as exc:
        return _error(str(exc))
    try:
        sock = listen(args.host, args.port)
    except ServeError as exc:
        return _error(str(exc))
    names = [os.path.basename(p.rstrip(os.sep)) or p for p in args.trace]
    return serve(command, sock, args.host, " vs ".join(names) if args.diff else ", ".join(names))


def missing_extra() -> str | None:
    """The one line to print when textual-serve is not installed, else None."""
    try:
        import textual_serve.server  # noqa: F401
    except ImportError:
        return f"serve needs textual-serve, an optional extra: {INSTALL}"
    return None


def viewer_command(paths: list[str], *, diff: bool = False, cycle: int | None = None) -> str:
    """The shell command each browser tab runs: the viewer of `paths`, checked now (a file
    that cannot be opened is said here, before anything is served). ValueError for arguments
    that do not fit together, ServeError for inputs that cannot be viewed."""
    from kinetoscope.cli import trace_path_problem
    from kinetoscope.tui.safe_text import clean

    if diff:
        if len(paths) != 2:
            raise ValueError(f"--diff compares two traces, BASE and NEW, not {len(paths)}")
        if cycle is not None:
            raise ValueError("--cycle picks a profiling cycle of a job, not of a diff")
    job = not diff and (len(paths) > 1 or os.path.isdir(paths[0]))
    if job:
        from kinetoscope.parser.ranks import JobError, discover

        try:
            discover(paths, cycle=cycle)
        except JobError as exc:
            raise ServeError(clean(str(exc))) from None
    else:
        if cycle is not None:
            raise ValueError("--cycle picks a profiling cycle of a job (a folder or several files)")
        for path in paths:
            problem = trace_path_problem(path)
            if problem is not None:
                raise ServeError(problem)
    argv = [sys.executable, "-m", "kinetoscope", "diff" if diff else "view"]
    argv += [os.path.abspath(p) for p in paths]
    if cycle is not None:
        argv += ["--cycle", str(cycle)]
    if os.name != "posix":
        return subprocess.list2cmdline(argv)
    return "exec " + shlex.join(argv)  # the shell textual-serve starts becomes the viewer


def is_local(host: str) -> bool:
    """Does `host` name this machine only (a loopback address, or a name that resolves to
    nothing else)?"""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` (0: a free port) and listening. ServeError, one line,
    for a port in use, a port that needs privileges, an address that is not this machine's."""
    try:
        infos = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ServeError(f"{host}: not an address to listen on ({reason})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # Reuse a port whose last connections are still closing (a restart), never a port
        # that another server listens on (Linux and macOS refuse that whatever this says).
        if os.name == "posix":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServeError(
                f"port {port} on {host} is in use (another server?): pick another with "
                "--port N, or --port 0 for any free port"
            ) from None
        if exc.errno == errno.EACCES:
            raise ServeError(
                f"port {port} on {host}: permission denied (ports below 1024 need privileges); "
                "pick another with --port N"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ServeError(f"{host}: not an address of this machine") from None
        raise ServeError(f"cannot listen on {host} port {port} ({exc.strerror or exc})") from None
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    """The address to open in a browser for `sock` (listening on `host`)."""
    port = sock.getsockname()[1]
    shown = host
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    if address is not None and address.is_unspecified:  # every interface: this machine's name
        shown = socket.gethostname() or "localhost"
    elif address is not None and address.version == 6:
        shown = f"[{address}]"
    return f"http://{shown}:{port}"


def serve(command: str, sock: socket.socket, host: str, shown: str) -> int:
    """Serve `command` (the viewer of `shown`) on `sock` until Ctrl+C or SIGTERM; 0 then."""
    import logging

    from kinetoscope.tui.safe_text import clean

    # A signal before the server's loop handles them ends it cleanly too: at first as
    # KeyboardInterrupt; while the loop and its handlers are made, held back (a loop
    # interrupted half-made complains as it is collected) and handled by the loop.
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    before = _children()
    try:
        logging.basicConfig(format="kinetoscope serve: %(message)s", level=logging.WARNING)
        held = _hold_signals()
        try:
            server = _server(command, sock, f"kinetoscope: {shown}", before)
        finally:
            _release_signals(held)
        url = url_of(sock, host)
        if not is_local(host):
            print(
                f"kinetoscope: warning: listening on {clean(host)}, not only on this machine: "
                f"anyone who can reach port {sock.getsockname()[1]} can open the viewer and read "
                "the trace (no password, no encryption); an SSH tunnel to 127.0.0.1 is safer",
                file=sys.stderr,
                flush=True,
            )
        # One line that says where, printed once it is ready (a script may wait for it).
        print(f"kinetoscope: serving {clean(shown)} on {url} (Ctrl+C stops it)", flush=True)
        server.run()
    except KeyboardInterrupt:  # stopped before it served
        pass
    finally:
        sock.close()
        _end_children(before)
    return 0


def _hold_signals() -> bool:
    """Hold SIGINT and SIGTERM back (POSIX); True if they were."""
    if not hasattr(signal, "pthread_sigmask"):
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    return True


def _release_signals(held: bool) -> None:
    if held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _server(command: str, sock: socket.socket, title: str, before: set[int]) -> Any:
    """The textual-serve server of `command`, serving on `sock` (made here: textual-serve is
    imported only by `serve`). `before`: the processes that are not its viewers."""
    import asyncio
    import logging

    from aiohttp import web
    from textual_serve.server import Server

    class ViewerServer(Server):
        """textual-serve's server on a socket bound beforehand; each page's websocket address
        is the one the browser used; sessions ended on shutdown."""

        def __init__(self) -> None:
            host, port = sock.getsockname()[:2]
            super().__init__(command, host=host, port=port, title=title)
            self.sessions: set[asyncio.Task[Any]] = set()
            # The loop, and its handlers of Ctrl+C and SIGTERM, made before serving begins.
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            for signum in STOP_SIGNALS:
                try:
                    self.loop.add_signal_handler(signum, self.request_exit)  # GracefulExit
                except NotImplementedError:  # Windows: Ctrl+C is KeyboardInterrupt there
                    pass

        async def on_startup(self, app: web.Application) -> None:
            """Where it listens is printed before serving (textual-serve's banner is not)."""

        async def handle_index(self, request: web.Request) -> Any:
            # The page's own address (an SSH tunnel's port, this machine's name), not the bind.
            self.public_url = f"{request.scheme}://{request.host}"
            return await super().handle_index(request)

        async def handle_websocket(self, request: web.Request) -> Any:
            task = asyncio.current_task()
            if task is not None:
                self.sessions.add(task)
            try:
                return await super().handle_websocket(request)
            finally:
                if task is not None:
                    self.sessions.discard(task)

        async def on_shutdown(self, app: web.Application) -> None:
            # Each viewer is told to quit (its web driver quits on SIGTERM as on a browser's
            # quit) and waited for while the loop runs, so its output is read to the end and
            # no pipe is left to close after the loop. Then the sessions end; a browser that
            # does not answer the websocket's close is not waited for long.
            # A viewer stopped while it starts is no failure to report ("failed to start").
            logging.getLogger("textual-serve").setLevel(logging.CRITICAL)
            viewers = _children(ended_too=True) - before
            for pid in viewers:
                _signal(pid, signal.SIGTERM)
            # Until each is gone, collected by the loop's child watcher (not only ended), and
            # a moment more for the loop to close their pipes.
            for signum, wait in ((None, STOP_WAIT_S), (KILL, QUIT_WAIT_S)):
                left = viewers & _children(ended_too=True)
                for pid in left if signum is not None else ():
                    _signal(pid, signum)  # one that would not quit
                deadline = time.monotonic() + wait
                while left and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                    left &= _children(ended_too=True)
            await asyncio.sleep(0.1)
            sessions = list(self.sessions)
            if sessions:
                _, late = await asyncio.wait(sessions, timeout=QUIT_WAIT_S)
                for task in late:
                    task.cancel()
                if late:
                    await asyncio.wait(late, timeout=QUIT_WAIT_S)

        def run(self) -> None:
            try:
                web.run_app(
                    self._make_app(),
                    sock=sock,
                    handle_signals=False,
                    print=None,
                    access_log=None,
                    shutdown_timeout=QUIT_WAIT_S,
                    loop=self.loop,
                )
            finally:
                if not self.loop.is_closed():
                    self.loop.close()

    return ViewerServer()


def _children(ended_too: bool = False) -> set[int]:
    """The process ids of this process's running descendants (`ended_too`: and those ended but
    not yet collected) (Linux's /proc; elsewhere none known)."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: the name may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and (ended_too or fields[0] != b"Z"):  # Z: ended, not collected
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _end_children(before: set[int]) -> None:
    """Terminate the viewer processes started while serving that are still running (asked to
    quit already): SIGTERM, then SIGKILL after STOP_WAIT_S."""
    left = _children() - before
    for pid in left:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left &= _children()
        for pid in list(left):
            if _reaped(pid):
                left.discard(pid)
    for pid in left:
        _signal(pid, KILL)
        _reaped(pid)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def _reaped(pid: int) -> bool:
    """Has `pid` ended (collected here if it was this process's child)?"""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: ended once it is gone from /proc
        return not os.path.exists(f"/proc/{pid}")
    except OSError:
        return True
    return done == pid
