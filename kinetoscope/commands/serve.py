"""`kinetoscope serve`: the viewer in a web browser, through textual-serve (an optional extra:
`pip install 'kinetoscope[serve]'`).

For the machine that can open a port but has no terminal to spare. A small web server listens
on one address (127.0.0.1 unless `--host` says otherwise); each browser tab that opens its page
gets its own viewer process, `kinetoscope view ...` (or `diff`) run under Textual's web driver,
which draws into the page through a websocket. The page's websocket address is taken from the
address the browser used, so a page reached through an SSH tunnel (`ssh -L 9000:localhost:8000`)
works as well as a direct one.

What a request must show before it is answered (docs/serve.md, "Security model"), checked here
in front of textual-serve's pieces: a `Host` that names this server (a loopback name, the
`--host` or `--public-url` name: no DNS rebinding); for the page and its websocket, the run's
secret token of the printed address; for the websocket, an `Origin` that is the page's own
(no other web page drives the viewer), a terminal of at most MAX_WIDTH x MAX_HEIGHT cells, and
a free session (`--max-sessions`). A session's viewer is ended when its websocket closes.

The port is bound here, before anything is served: a busy port is one line, `--port 0` takes a
free one, and the line that says where it listens names the real port. Ctrl+C (or SIGTERM)
stops the server: each viewer gets SIGTERM (on which Textual's web driver quits), and one that
has not ended STOP_WAIT_S later is killed, so that no viewer process outlives it.
"""

from __future__ import annotations

import argparse
import errno
import functools
import hmac
import ipaddress
import logging
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from kinetoscope.common.errors import KinetoscopeError, UsageError
from kinetoscope.common.options import positive

if TYPE_CHECKING:
    import asyncio

    from aiohttp import web

INSTALL = "pip install 'kinetoscope[serve]'"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
QUIT_WAIT_S = 1.0  # how long a session is waited for once its viewer has ended
END_WAIT_S = 2.0  # how long a closed session's viewer is given to quit when asked, before SIGTERM
STOP_WAIT_S = 5.0  # how long the viewers are given to quit, before SIGKILL
MAX_WIDTH, MAX_HEIGHT = 500, 200  # the largest terminal a browser may ask for, in cells
DEFAULT_SIZE = (80, 24)  # a websocket that does not say its size (as textual-serve)
DEFAULT_SESSIONS = 4  # viewers at once: each reads the trace into its own memory
MAX_MESSAGE = 1 << 16  # bytes of one websocket message (keys, a resize, a ping)
TOKEN_BYTES = 24  # the run's secret: 192 random bits, 32 characters in the URL
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
KILL = getattr(signal, "SIGKILL", signal.SIGTERM)  # for a viewer that would not quit

log = logging.getLogger("kinetoscope.commands.serve")


class ServeError(Exception):
    """The server cannot start; the message is one line for the user."""


def register(sub: Any) -> None:
    """The `serve` subcommand (its handler is `run_serve_command`)."""
    serve = sub.add_parser(
        "serve",
        help="run the viewer in a web browser (needs the serve extra)",
        description="Serve the viewer to a web browser through textual-serve: open the address "
        "it prints. Each browser tab gets its own viewer. Needs the serve extra: " + INSTALL,
        epilog="Ctrl+C stops the server and its viewers. The printed address holds a secret "
        "token, new each run: whoever has the address can open the viewer and read the trace. "
        "It listens on this machine only (127.0.0.1) unless --host says otherwise, and there is "
        "no encryption; from another machine, prefer an SSH tunnel: ssh -L 8000:localhost:8000 "
        "HOST. Security model: docs/serve.md.",
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
        "--public-url",
        type=_public_url,
        metavar="URL",
        help="the address browsers use when it is not this server's own (a reverse proxy, "
        "https://viewer.example.org): its name is answered and its origin accepted, and the "
        "printed address uses it",
    )
    serve.add_argument(
        "--max-sessions",
        type=positive,
        default=DEFAULT_SESSIONS,
        metavar="N",
        help=f"browser tabs served at once (default {DEFAULT_SESSIONS}; each runs a viewer "
        "with the trace in its own memory); one more is refused until one closes",
    )
    serve.add_argument(
        "--diff", action="store_true", help="serve the diff viewer of two traces, BASE and NEW"
    )
    serve.add_argument(
        "--cycle",
        type=positive,
        metavar="N",
        help="a job's folder: view profiling cycle N (1 = the oldest)",
    )
    serve.set_defaults(handler=run_serve_command)


def _port(text: str) -> int:
    from kinetoscope.common.numbers import MAX_NUMBER_TEXT, shown

    if len(text) > MAX_NUMBER_TEXT:  # before int(): 5,000 digits are a ValueError of their own
        raise argparse.ArgumentTypeError(f"{shown(text)} is too long a port number")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {shown(text)}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port from 0 to 65535, not {value}")
    return value


def _public_url(text: str) -> str:
    """`--public-url`: http(s)://NAME[:PORT] and nothing more (no path: the pages are served at
    the root), lower case, with no trailing slash."""
    from kinetoscope.present.safe_text import clean

    found = re.fullmatch(r"(https?)://([^/?#@\s]+?)/?", text.strip(), re.IGNORECASE)
    parts = _authority(found.group(2)) if found else None
    if found is None or parts is None:
        raise argparse.ArgumentTypeError(
            f"not an address like https://NAME or http://NAME:PORT: {clean(text)!r}"
        )
    name, port = parts
    shown = f"[{name}]" if ":" in name else name
    return f"{found.group(1).lower()}://{shown}" + (f":{port}" if port is not None else "")


def run_serve_command(args: argparse.Namespace) -> int:
    """`kinetoscope serve ...`: 0 when stopped by Ctrl+C or SIGTERM; KinetoscopeError when it
    cannot start (1), UsageError for arguments that do not fit together (2)."""
    missing = missing_extra()
    if missing is not None:
        raise KinetoscopeError(missing)
    try:
        command = viewer_command(args.trace, diff=args.diff, cycle=args.cycle)
    except ValueError as exc:  # the arguments do not fit together
        raise UsageError(str(exc)) from None
    except ServeError as exc:
        raise KinetoscopeError(str(exc)) from None
    try:
        sock = listen(args.host, args.port)
    except ServeError as exc:
        raise KinetoscopeError(str(exc)) from None
    names = [os.path.basename(p.rstrip(os.sep)) or p for p in args.trace]
    guard = Guard(args.host, args.public_url, printed=url_of(sock, args.host))
    shown = " vs ".join(names) if args.diff else ", ".join(names)
    return serve(command, sock, args.host, shown, guard=guard, max_sessions=args.max_sessions)


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
    from kinetoscope.parser.source import trace_path_problem
    from kinetoscope.present.safe_text import clean

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


class Guard:
    """What a request must show to be answered: a `Host` that names this server, the run's
    token (the page and its websocket), an `Origin` that is the page's own (the websocket).

    `host`: the address listened on; `public_url`: `--public-url` (normalised); `printed`: the
    address printed without its token (the name it shows is answered too)."""

    def __init__(
        self, host: str, public_url: str | None, *, printed: str, token: str | None = None
    ) -> None:
        self.token = token if token is not None else secrets.token_urlsafe(TOKEN_BYTES)
        self.public_url = public_url
        self.printed = public_url or printed
        self.any_address = _unspecified(host)  # every interface: any address literal is ours
        self.names = {"localhost"}
        self.schemes = {"http"}
        self.public: tuple[str, tuple[str, int | None]] | None = None
        for url in [printed] + ([public_url] if public_url else []):
            scheme, _, authority = url.partition("://")
            parts = _authority(authority)
            if parts is not None:
                self.names.add(parts[0])
                if url is public_url:
                    self.schemes.add(scheme)
                    self.public = (scheme, parts)
        listened = _authority(host) if not self.any_address else None
        if listened is not None:
            self.names.add(listened[0])

    def url(self) -> str:
        """The address to print, with the token: the one place the token is shown."""
        return f"{self.printed}/?token={self.token}"

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(
            given.encode("utf-8", "surrogatepass"), self.token.encode("utf-8")
        )

    def host_ok(self, host: str | None) -> bool:
        """Is `host`, a request's Host header, a name of this server? Its port is not checked:
        a tunnel's or a proxy's port is the browser's (`ssh -L 9000:localhost:8000`), and the
        name is what DNS rebinding changes."""
        parts = _authority(host) if host else None
        if parts is None:
            return False
        if parts[0] in self.names:
            return True
        try:
            address = ipaddress.ip_address(parts[0])
        except ValueError:
            return False
        return address.is_loopback or self.any_address

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        """Is `origin`, a websocket's Origin header, the page's own: the scheme, name and port
        of `host` (an answered Host)? A browser always sends it; a page of another site, a
        file or a sandboxed frame (`null`) sends its own."""
        if not origin or not host or not self.host_ok(host):
            return False
        found = re.fullmatch(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#@\s]+)", origin)
        if found is None or found.group(1).lower() not in self.schemes:
            return False
        own, asked = _authority(found.group(2)), _authority(host)
        if own is None or asked is None:
            return False
        default = 443 if found.group(1).lower() == "https" else 80
        return own[0] == asked[0] and (own[1] or default) == (asked[1] or default)

    def websocket_url(self, host: str) -> str:
        """The websocket address of the page asked for with `host` (an answered Host): its
        name and port, wss when it is the `--public-url`'s https name; the token in its path
        (the page's script adds the terminal's size as the query)."""
        parts = _authority(host)
        assert parts is not None
        scheme = "http"
        if self.public is not None and self.public[1][0] == parts[0]:
            scheme = self.public[0]
        name = f"[{parts[0]}]" if ":" in parts[0] else parts[0]
        port = f":{parts[1]}" if parts[1] is not None else ""
        return f"{'wss' if scheme == 'https' else 'ws'}://{name}{port}/ws/{self.token}"


def _authority(text: str) -> tuple[str, int | None] | None:
    """NAME[:PORT] or [IPV6][:PORT] (a Host header, an origin's or a URL's authority) as the
    name, lower case (an address in its standard form), and the port; None if it is neither."""
    found = re.fullmatch(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9._-]+))(?::(\d{1,5}))?", text)
    if found is None:
        return None
    name = (found.group(1) or found.group(2)).lower()
    try:
        name = str(ipaddress.ip_address(name))
    except ValueError:
        if found.group(1) is not None:  # brackets hold an IPv6 address, nothing else
            return None
    port = int(found.group(3)) if found.group(3) is not None else None
    if port is not None and not 0 < port <= 65535:
        return None
    return name, port


def _unspecified(host: str) -> bool:
    """Is `host` every interface (0.0.0.0, ::)?"""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def terminal_size(query: Any) -> tuple[int, int]:
    """The terminal a websocket asks for (`width`, `height` of its query; absent: 80x24).
    ValueError, one line, for a size that is not a number of cells from 1 to the bound."""
    size = []
    for key, default, bound in (
        ("width", DEFAULT_SIZE[0], MAX_WIDTH),
        ("height", DEFAULT_SIZE[1], MAX_HEIGHT),
    ):
        text = query.get(key)
        if text is None:
            size.append(default)
            continue
        if not re.fullmatch(r"\d{1,6}", text) or not 1 <= int(text) <= bound:
            raise ValueError(
                f"a terminal of at most {MAX_WIDTH}x{MAX_HEIGHT} cells, not {key} {text[:12]!r}"
            )
        size.append(int(text))
    return size[0], size[1]


def _resize(data: Any) -> tuple[int, int] | None:
    """The size a browser's resize message asks for, within the bound (a larger window gets
    the largest terminal); None for a message that is not a size."""
    if not isinstance(data, dict):
        return None
    width, height = data.get("width"), data.get("height")
    if not all(type(v) is int for v in (width, height)):
        return None
    return max(1, min(width, MAX_WIDTH)), max(1, min(height, MAX_HEIGHT))


def serve(
    command: str,
    sock: socket.socket,
    host: str,
    shown: str,
    *,
    guard: Guard | None = None,
    max_sessions: int = DEFAULT_SESSIONS,
) -> int:
    """Serve `command` (the viewer of `shown`) on `sock` until Ctrl+C or SIGTERM; 0 then."""
    from kinetoscope.present.safe_text import clean

    if guard is None:
        guard = Guard(host, None, printed=url_of(sock, host))
    # A signal before the server's loop handles them ends it cleanly too: at first as
    # KeyboardInterrupt; while the loop and its handlers are made, held back (a loop
    # interrupted half-made complains as it is collected) and handled by the loop.
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    before = _children()
    try:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_OneLine())
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
        held = _hold_signals()
        try:
            server = _server(command, sock, f"kinetoscope: {shown}", before, guard, max_sessions)
        finally:
            _release_signals(held)
        if not is_local(host):
            print(
                f"kinetoscope: warning: listening on {clean(host)}, not only on this machine: "
                f"anyone who can reach port {sock.getsockname()[1]} and sees the address (its "
                "token travels unencrypted) can open the viewer and read the trace; an SSH "
                "tunnel to 127.0.0.1 is safer",
                file=sys.stderr,
                flush=True,
            )
        # One line that says where, printed once it is ready (a script may wait for it).
        listening = f"listening on {url_of(sock, host)}; " if guard.public_url else ""
        print(
            f"kinetoscope: serving {clean(shown)} on {guard.url()} ({listening}Ctrl+C stops it)",
            flush=True,
        )
        server.run()
    except KeyboardInterrupt:  # stopped before it served
        pass
    finally:
        sock.close()
        _end_children(before)
    return 0


class _OneLine(logging.Formatter):
    """A log record as one line, `kinetoscope serve: MESSAGE: ERROR (WHAT IT SAYS)`, never a
    traceback (a malformed request logged by aiohttp, a session's viewer that failed): what a
    client sent is in it, so it is cleaned and cut."""

    LIMIT = 200

    def format(self, record: logging.LogRecord) -> str:
        from kinetoscope.present.safe_text import clean

        text = record.getMessage()
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            said = " ".join(str(error).split())
            text += f": {error.__class__.__name__}" + (f" ({said})" if said else "")
        text = " ".join(text.split())
        if len(text) > self.LIMIT:
            text = text[: self.LIMIT] + "..."
        return "kinetoscope serve: " + clean(text)


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


def _server(
    command: str,
    sock: socket.socket,
    title: str,
    before: set[int],
    guard: Guard,
    max_sessions: int,
) -> Any:
    """The textual-serve server of `command`, serving on `sock` (made here: textual-serve is
    imported only by `serve`). `before`: the processes that are not its viewers; `guard`: what
    a request must show; `max_sessions`: the sessions served at once."""
    from textual_serve.server import Server

    class ViewerServer(_ViewerServer, Server):
        """textual-serve's server with kinetoscope's checks, sessions and shutdown."""

    return ViewerServer(command, sock, title, before, guard, max_sessions)


class _ViewerServer:
    """textual-serve's server (the class it is mixed into) on a socket bound beforehand, behind
    the guard's checks; each page's websocket address is the one the browser used; a session's
    viewer is ended with its websocket; sessions ended on shutdown."""

    command: str
    title: str
    download_manager: Any
    templates_path: Any
    statics_path: Any
    request_exit: Any
    handle_download: Any

    def __init__(
        self,
        command: str,
        sock: socket.socket,
        title: str,
        before: set[int],
        guard: Guard,
        max_sessions: int,
    ) -> None:
        import asyncio

        host, port = sock.getsockname()[:2]
        super().__init__(command, host=host, port=port, title=title)  # type: ignore[call-arg]
        self.sock, self.before, self.guard, self.max_sessions = sock, before, guard, max_sessions
        # Each session's task -> its viewer (None while it starts): a slot of
        # --max-sessions is held until the viewer's process has been reaped.
        self.sessions: dict[asyncio.Task[Any], Any] = {}
        self.closing = False
        # The loop, and its handlers of Ctrl+C and SIGTERM, made before serving begins.
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        for signum in STOP_SIGNALS:
            try:
                self.loop.add_signal_handler(signum, self.request_exit)  # GracefulExit
            except NotImplementedError:  # Windows: Ctrl+C is KeyboardInterrupt there
                pass

    async def _make_app(self) -> web.Application:
        import aiohttp_jinja2
        import jinja2
        from aiohttp import web

        app = web.Application(middlewares=[_answer_own_names(self.guard)])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes(
            [
                web.get("/", self.handle_index, name="index"),
                web.get("/ws/{token}", self.handle_websocket, name="websocket"),
                web.get("/download/{key}", self.handle_download, name="download"),
                web.static("/static", self.statics_path, name="static"),
            ]
        )
        app.on_response_prepare.append(_private_headers)
        app.on_shutdown.append(self.on_shutdown)
        return app

    async def handle_index(self, request: web.Request) -> Any:
        import aiohttp_jinja2
        from aiohttp import web

        if not self.guard.token_ok(request.query.get("token", "")):
            raise _refusal(web.HTTPForbidden, "open the address it printed, with its token")
        font_size = request.query.get("fontsize", "16")
        context = {
            "font_size": int(font_size) if re.fullmatch(r"\d{1,2}", font_size) else 16,
            # The page's own address (an SSH tunnel's port, this machine's name).
            "app_websocket_url": self.guard.websocket_url(request.headers["Host"]),
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_websocket(self, request: web.Request) -> Any:
        # Refused before the upgrade, with an HTTP status, and before any viewer starts.
        width, height = _session_asked(self.guard, request)
        websocket = _websocket_for(request)
        task = self._take_slot()
        await self._session(task, request, websocket, width, height)
        return websocket

    def _take_slot(self) -> asyncio.Task[Any]:
        """A slot of --max-sessions for the session of the current task (its handler's);
        503 while the server stops or when every slot is held."""
        import asyncio

        from aiohttp import web

        task = asyncio.current_task()
        if self.closing or task is None:
            raise _refusal(web.HTTPServiceUnavailable, "the server is stopping")
        held = sum(1 for viewer in self.sessions.values() if _holds_slot(viewer))
        if held >= self.max_sessions:
            raise _refusal(
                web.HTTPServiceUnavailable,
                f"{held} sessions open, the most it serves (--max-sessions): close one first",
            )
        self.sessions[task] = None
        return task

    async def _session(
        self,
        task: asyncio.Task[Any],
        request: web.Request,
        websocket: web.WebSocketResponse,
        width: int,
        height: int,
    ) -> None:
        """One browser tab's session, in its slot: the websocket upgraded, the viewer started,
        the browser's messages pumped to it until the websocket closes; then the viewer ended
        and the slot freed, whatever ended the session."""
        import asyncio

        viewer: Any = None
        try:
            await websocket.prepare(request)
            viewer = _viewer_class()(
                self.command,
                write_bytes=websocket.send_bytes,
                write_str=websocket.send_str,
                close=websocket.close,
                download_manager=self.download_manager,
            )
            self.sessions[task] = viewer
            await viewer.start(width, height)
            await _pump(websocket, viewer)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # one line, the session ends; the server goes on
            log.warning("a session ended: %s", exc.__class__.__name__)
        finally:
            try:
                if viewer is not None:
                    await _end_viewer(viewer)
                if websocket.prepared:
                    await websocket.close()
            finally:
                self.sessions.pop(task, None)

    async def on_shutdown(self, app: web.Application) -> None:
        # No session starts from now. Each viewer is told to quit (its web driver quits on
        # SIGTERM as on a browser's quit) and waited for while the loop runs, so its output
        # is read to the end and no pipe is left to close after the loop. Then the
        # sessions end; a browser that does not answer the websocket's close is not waited
        # for long. A viewer stopped while it starts is no failure to report.
        import asyncio

        self.closing = True
        logging.getLogger("textual-serve").setLevel(logging.CRITICAL)
        await _stop_viewers(self.before)
        await asyncio.sleep(0.1)
        await _end_sessions(list(self.sessions))

    def run(self) -> None:
        from aiohttp import web

        try:
            web.run_app(
                self._make_app(),
                sock=self.sock,
                handle_signals=False,
                print=None,
                access_log=None,
                shutdown_timeout=QUIT_WAIT_S,
                loop=self.loop,
            )
        finally:
            if not self.loop.is_closed():
                self.loop.close()


def _refusal(kind: Any, reason: str) -> Any:
    """An HTTP refusal of class `kind` (aiohttp's), with its one-line reason."""
    return kind(text=f"kinetoscope serve: {reason}\n")


def _answer_own_names(guard: Guard) -> Any:
    """The middleware that answers only requests for this server's own names, refused 421
    (DNS rebinding: a page of another site whose name is made to point here asks with its
    own name)."""
    from aiohttp import web

    @web.middleware
    async def answer_own_names(request: web.Request, handler: Any) -> Any:
        hosts = request.headers.getall("Host", [])
        if len(hosts) != 1 or not guard.host_ok(hosts[0]):
            return _refusal(
                web.HTTPMisdirectedRequest,
                "this server answers only its own names "
                "(127.0.0.1, localhost, [::1], --host, --public-url)",
            )
        return await handler(request)

    return answer_own_names


async def _private_headers(request: web.Request, response: web.StreamResponse) -> None:
    """No page of another site frames the viewer; no address with the token is sent on."""
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
    response.headers["Cache-Control"] = "no-store"


def _session_asked(guard: Guard, request: web.Request) -> tuple[int, int]:
    """The terminal a websocket request asks for, once it has shown the run's token (else 403)
    and the page's own Origin (else 403); 400 for a terminal over the bound."""
    from aiohttp import web

    if not guard.token_ok(request.match_info["token"]):
        raise _refusal(web.HTTPForbidden, "open the address it printed, with its token")
    if not guard.origin_ok(request.headers.get("Origin"), request.headers["Host"]):
        raise _refusal(web.HTTPForbidden, "a websocket only for the viewer's own page")
    try:
        return terminal_size(request.query)
    except ValueError as exc:
        raise _refusal(web.HTTPBadRequest, str(exc)) from None


def _websocket_for(request: web.Request) -> web.WebSocketResponse:
    """The websocket response of `request` (messages of at most MAX_MESSAGE bytes), not yet
    prepared; 400 for a request that is not a websocket's."""
    from aiohttp import web

    websocket = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_MESSAGE)
    if not websocket.can_prepare(request).ok:
        raise _refusal(web.HTTPBadRequest, "a websocket, for the viewer's page only")
    return websocket


@functools.cache
def _viewer_class() -> type:
    """textual-serve's service of one session, its process started in a session of its own
    (the terminal's Ctrl+C is the server's to pass on, not each viewer's) and kept at hand, to
    be ended when the session ends (made once, here: textual-serve is imported only by
    `serve`)."""
    import asyncio

    from textual_serve.app_service import AppService

    class Viewer(AppService):
        process: asyncio.subprocess.Process | None = None

        async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
            self._process = self.process = await asyncio.create_subprocess_shell(
                self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._build_environment(width=width, height=height),
                start_new_session=True,
            )
            self._stdin = self.process.stdin
            return self.process

    return Viewer


async def _pump(websocket: web.WebSocketResponse, viewer: Any) -> None:
    """The browser's messages to the viewer until its websocket closes: keys, a size (within
    the bound), focus; anything else is no message."""
    import json

    from aiohttp import WSMsgType

    async for message in websocket:
        if message.type != WSMsgType.TEXT:
            continue
        try:
            envelope = json.loads(message.data)
        except ValueError:
            continue
        if not isinstance(envelope, list) or not envelope:
            continue
        kind, data = envelope[0], envelope[1] if len(envelope) > 1 else None
        if kind == "stdin" and isinstance(data, str):
            await viewer.send_bytes(data.encode("utf-8", "replace"))
        elif kind == "resize" and (size := _resize(data)) is not None:
            await viewer.set_terminal_size(*size)
        elif kind == "ping":
            await websocket.send_json(["pong", data])
        elif kind == "blur":
            await viewer.blur()
        elif kind == "focus":
            await viewer.focus()


async def _end_viewer(viewer: Any) -> None:
    """End a session's viewer: asked to quit, then SIGTERM, then SIGKILL, each waited for a
    while; then its output read to the end."""
    import asyncio

    process = viewer.process
    if process is not None:
        await viewer.send_meta({"type": "quit"})
        for signum, wait in (
            (None, END_WAIT_S),
            (signal.SIGTERM, STOP_WAIT_S),
            (KILL, STOP_WAIT_S),
        ):
            if process.returncode is not None:
                break
            if signum is not None:
                try:
                    process.send_signal(signum)
                except ProcessLookupError:
                    pass
            try:
                await asyncio.wait_for(process.wait(), wait)
            except asyncio.TimeoutError:
                pass
    try:
        await asyncio.wait_for(viewer.stop(), QUIT_WAIT_S)
    except asyncio.TimeoutError:
        pass


async def _stop_viewers(before: set[int]) -> None:
    """On shutdown: every viewer started while serving (the processes not in `before`) sent
    SIGTERM, and SIGKILL STOP_WAIT_S later if it is still there; waited for until each is
    gone, collected by the loop's child watcher (not only ended)."""
    import asyncio

    viewers = _children(ended_too=True) - before
    for pid in viewers:
        _signal(pid, signal.SIGTERM)
    # Until each is gone, collected by the loop's child watcher (not only ended), and
    # a moment more (the caller's) for the loop to close their pipes.
    for signum, wait in ((None, STOP_WAIT_S), (KILL, STOP_WAIT_S)):
        left = viewers & _children(ended_too=True)
        for pid in left if signum is not None else ():
            _signal(pid, signum)  # one that would not quit
        deadline = time.monotonic() + wait
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            left &= _children(ended_too=True)


async def _end_sessions(sessions: list[asyncio.Task[Any]]) -> None:
    """On shutdown, once the viewers are gone: the sessions' handlers waited for a while,
    then those still running cancelled (a browser that does not answer the close)."""
    import asyncio

    if sessions:
        _, late = await asyncio.wait(sessions, timeout=QUIT_WAIT_S + 1)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=QUIT_WAIT_S)


def _holds_slot(viewer: Any) -> bool:
    """Does a session hold a slot of --max-sessions? While its viewer starts and runs; no longer
    once the viewer's process has been reaped, even before its session's handler has ended (a
    new tab right after a closed one gets a session)."""
    process = getattr(viewer, "process", None)
    if process is None:
        return True  # starting
    if process.returncode is not None:
        return False
    try:
        os.kill(process.pid, 0)
    except ProcessLookupError:  # reaped; the loop has not heard yet
        return False
    except OSError:
        pass
    return True


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
