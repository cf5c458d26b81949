"""`kinetoscope serve`: the viewer in a web browser through textual-serve (issues 18 and 25).

The server is started as a user would, in its own process on a free localhost port (`--port 0`:
the port it took is in the line it prints); its page is fetched over HTTP, a browser's websocket
session is opened (the viewer draws the trace into it), and the server is stopped by its pid:
it exits cleanly, with no traceback, and takes its viewer processes with it.

Issue 25: what an attacker's page (another Origin), a DNS-rebinding name (another Host), a
client without the printed token or one asking for a huge terminal gets is a refusal before
any viewer starts; a session's viewer ends with its websocket; the sessions are bounded. All
traffic goes to 127.0.0.1 only, with real websockets (aiohttp's client)."""

from __future__ import annotations

import asyncio
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

from kinetoscope.commands.cli import main
from kinetoscope.commands.serve import (
    MAX_HEIGHT,
    MAX_WIDTH,
    Guard,
    _resize,
    is_local,
    terminal_size,
    viewer_command,
)

SAMPLE = SAMPLES / "demo_cpu.pt.trace.json.gz"
START_S = 60.0  # a loaded machine: Python, Textual and aiohttp imported before the first line


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kinetoscope", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # unbuffered: what select() says is readable is what read() gets
        env={**os.environ, "COLUMNS": "200"},
    )


def first_line(server: subprocess.Popen, timeout: float = START_S) -> str:
    """The server's first line on stdout (where it listens), waited for at most `timeout`."""
    assert server.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(server.stdout, selectors.EVENT_READ)
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        if not selector.select(timeout=0.5):
            if server.poll() is not None:
                break
            continue
        byte = server.stdout.read(1)
        if not byte:
            break
        line += byte
    selector.close()
    return line.decode()


ADDRESS = re.compile(
    r"on (http://127\.0\.0\.1:(\d+))/\?token=([A-Za-z0-9_-]{32}) \(Ctrl\+C stops it\)"
)


def address(line: str) -> tuple[str, int, str]:
    """The printed address's origin, port and token."""
    found = ADDRESS.search(line)
    assert found, line
    return found.group(1), int(found.group(2)), found.group(3)


def stop(server: subprocess.Popen, signum: int = signal.SIGINT) -> tuple[int, str, str]:
    """Stop the server by its pid; its status and what it printed after the first line."""
    os.kill(server.pid, signum)
    out, err = server.communicate(timeout=30)
    return server.returncode, out.decode(), err.decode()


def children_of(pid: int) -> set[int]:
    """The running processes whose parent is `pid` (Linux's /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if fields[0] != b"Z" and int(fields[1]) == pid:
                found.add(int(entry))
    return found


def test_serve_on_a_free_port_serves_the_viewers_page_and_stops_by_its_pid():
    server = start(str(SAMPLE), "--port", "0")
    try:
        line = first_line(server)
        url, port, token = address(line)
        assert port != 0 and "demo_cpu.pt.trace.json.gz" in line
        with urllib.request.urlopen(f"{url}/?token={token}", timeout=30) as response:
            assert response.status == 200
            assert response.headers["X-Frame-Options"] == "DENY"
            assert response.headers["Referrer-Policy"] == "no-referrer"
            page = response.read().decode()
        # The viewer's page: the app's name with the trace's, and textual-serve's terminal.
        assert "kinetoscope: demo_cpu.pt.trace.json.gz" in page
        assert "textual.js" in page and f'"ws://127.0.0.1:{port}/ws/{token}"' in page
    finally:
        code, out, err = stop(server)
    assert code == 0, err
    assert "Traceback" not in out + err
    with pytest.raises(OSError):  # the port is closed
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def raw_status(port: int, request: bytes) -> int:
    """The HTTP status the server answers `request`, sent as it is, with."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(request)
        answer = b""
        while b"\r\n" not in answer:
            chunk = connection.recv(256)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def websocket_url_of(page: str) -> str:
    found = re.search(r'data-session-websocket-url="([^"]+)"', page)
    assert found, page
    return found.group(1)


async def receive_until(ws, wanted: bytes, timeout: float = START_S) -> bytes:
    """What the viewer draws into the websocket, until `wanted` is in it (or it closes)."""
    import aiohttp

    drawn = b""
    deadline = time.monotonic() + timeout
    while wanted not in drawn and time.monotonic() < deadline:
        try:
            message = await ws.receive(timeout=1)
        except asyncio.TimeoutError:
            continue
        if message.type == aiohttp.WSMsgType.BINARY:
            drawn += message.data
        elif message.type != aiohttp.WSMsgType.TEXT:
            break
    return drawn


async def wait_for_viewer(server: subprocess.Popen, timeout: float = START_S) -> set[int]:
    deadline = time.monotonic() + timeout
    while not (viewers := children_of(server.pid)) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return viewers


def gone(pids: set[int], timeout: float = 30.0) -> bool:
    """Have these processes all ended (and been collected) within `timeout`?"""
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_browser_session_runs_the_viewer_and_ctrl_c_ends_it_too():
    import aiohttp

    server = start(str(SAMPLE), "--port", "0")
    viewers: set[int] = set()
    drawn = b""

    async def browse(url: str, token: str) -> None:
        nonlocal drawn, viewers
        async with aiohttp.ClientSession() as session:
            # As a browser: the page from the printed address, then the websocket it names,
            # with the page's origin.
            async with session.get(f"{url}/?token={token}") as response:
                assert response.status == 200
                ws_url = websocket_url_of(await response.text())
            assert ws_url == url.replace("http://", "ws://") + f"/ws/{token}"
            async with session.ws_connect(ws_url + "?width=120&height=36", origin=url) as ws:
                await ws.send_json(["resize", {"width": 120, "height": 36}])
                # The viewer's screen comes as the terminal's bytes: the trace's own names.
                drawn = await receive_until(ws, b"ProfilerStep")
                viewers = children_of(server.pid)
                # Ctrl+C while the browser is still connected.
                os.kill(server.pid, signal.SIGINT)
                while True:
                    message = await ws.receive(timeout=30)
                    if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                        break

    try:
        url, _, token = address(first_line(server))
        asyncio.run(browse(url, token))
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert b"ProfilerStep" in drawn  # the viewer drew the trace into the page
    assert len(viewers) == 1  # one viewer process for the one session
    assert server.returncode == 0, err
    assert b"Traceback" not in out + err
    assert all(not Path(f"/proc/{pid}").exists() for pid in viewers)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_foreign_origin_host_or_token_and_a_huge_terminal_are_refused_before_any_viewer():
    import aiohttp

    server = start(str(SAMPLE), "--port", "0")
    refused: dict[str, int] = {}
    bodies: dict[str, str] = {}

    async def attack(url: str, port: int, token: str) -> None:
        ws_url = f"ws://127.0.0.1:{port}/ws/{token}"
        async with aiohttp.ClientSession() as session:

            async def page(name: str, query: str, **headers: str) -> None:
                async with session.get(f"{url}/{query}", headers=headers) as response:
                    refused[name] = response.status
                    bodies[name] = await response.text()

            async def websocket(name: str, target: str, **kwargs: Any) -> None:
                try:
                    async with session.ws_connect(target, **kwargs):
                        refused[name] = 101
                except aiohttp.WSServerHandshakeError as exc:
                    refused[name] = exc.status

            await page("page without the token", "")
            await page("page with another token", "?token=" + "A" * 32)
            # DNS rebinding: evil.example made to point at 127.0.0.1, its page asks with its name.
            await page("page for another name", f"?token={token}", Host=f"evil.example:{port}")
            # Another web page open in the browser opens the websocket with its own origin.
            await websocket("foreign origin", ws_url, origin="http://evil.example")
            await websocket("another local port", ws_url, origin="http://127.0.0.1:1")
            await websocket("a sandboxed frame", ws_url, origin="null")
            await websocket("no origin", ws_url)
            await websocket(
                "rebound websocket",
                ws_url,
                origin=f"http://evil.example:{port}",
                headers={"Host": f"evil.example:{port}"},
            )
            await websocket("websocket with another token", ws_url[:-32] + "B" * 32, origin=url)
            await websocket("the old address", f"ws://127.0.0.1:{port}/ws", origin=url)
            huge = ws_url + "?width=100000&height=100000"
            await websocket("huge terminal", huge, origin=url)
            await websocket("one column too many", ws_url + f"?width={MAX_WIDTH + 1}", origin=url)
            await websocket("no columns", ws_url + "?width=0&height=24", origin=url)
            async with session.get(huge, headers={"Origin": url}) as response:
                bodies["huge terminal"] = await response.text()
            async with session.get(ws_url, headers={"Origin": url}) as response:
                refused["not a websocket"] = response.status
            viewers.update(children_of(server.pid))

    viewers: set[int] = set()
    malformed: list[int] = []
    try:
        line = first_line(server)
        url, port, token = address(line)
        asyncio.run(attack(url, port, token))
        page = f"GET /?token={token} HTTP/1.1\r\n".encode()
        for request in (
            page + b"\r\n",  # no Host
            page + b"Host: localhost\r\nHost: evil.example\r\n\r\n",
            page + b"Host: \xff\xfe\r\n\r\n",
            page + b"Host: localhost\r\nX: " + b"\x1b[2J" * 5000 + b"\r\n\r\n",
            b"\x16\x03\x01 not HTTP\r\n\r\n",
        ):
            malformed.append(raw_status(port, request))
    finally:
        code, out, err = stop(server, signal.SIGTERM)
    assert refused == {
        "page without the token": 403,
        "page with another token": 403,
        "page for another name": 421,
        "foreign origin": 403,
        "another local port": 403,
        "a sandboxed frame": 403,
        "no origin": 403,
        "rebound websocket": 421,
        "websocket with another token": 403,
        "the old address": 404,
        "huge terminal": 400,
        "one column too many": 400,
        "no columns": 400,
        "not a websocket": 400,
    }
    assert malformed == [400, 400, 421, 400, 400]
    assert viewers == set()  # no viewer process was started for any of them
    # What aiohttp logs of a malformed request is a line each, cleaned, never a traceback.
    assert all(line.startswith("kinetoscope serve: ") for line in err.splitlines()), err
    assert "\x1b" not in err and all(len(line) < 300 for line in err.splitlines())
    assert bodies["huge terminal"] == (
        f"kinetoscope serve: a terminal of at most {MAX_WIDTH}x{MAX_HEIGHT} cells, not width "
        "'100000'\n"
    )
    assert bodies["page for another name"].startswith("kinetoscope serve: this server answers")
    assert "textual.js" not in "".join(bodies.values())
    assert code == 0 and "Traceback" not in out + err  # SIGTERM when idle
    assert (line + out + err).count(token) == 1  # the token is shown once: the printed address


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_sessions_viewer_ends_with_its_websocket_and_sessions_are_bounded():
    import aiohttp

    server = start(str(SAMPLE), "--port", "0", "--max-sessions", "1")
    first: set[int] = set()
    second: set[int] = set()
    second_refused = 0
    drawn = b""
    first_gone = False

    async def browse(port: int, token: str) -> None:
        nonlocal drawn, first, second, second_refused, first_gone
        # Through a tunnel, ssh -L 9000:localhost:PORT: the browser says localhost:9000.
        tunnel = {"origin": "http://localhost:9000", "headers": {"Host": "localhost:9000"}}
        ws_url = f"ws://127.0.0.1:{port}/ws/{token}?width=100&height=30"
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(ws_url, **tunnel) as ws:
                drawn = await receive_until(ws, b"ProfilerStep")
                first = children_of(server.pid)
                try:  # a second tab, while the first is open
                    async with session.ws_connect(ws_url, **tunnel):
                        pass
                except aiohttp.WSServerHandshakeError as exc:
                    second_refused = exc.status
            # The first tab closed: its viewer ends, and the slot is free again.
            first_gone = await asyncio.get_running_loop().run_in_executor(None, gone, first)
            async with session.ws_connect(ws_url, **tunnel) as ws:
                second = await wait_for_viewer(server)
                await receive_until(ws, b"ProfilerStep")
                # Messages that are not a browser's are no messages: the session goes on.
                for junk in (
                    "{",
                    "[]",
                    '{"a": 1}',
                    '["stdin", 5]',
                    '["resize", "x"]',
                    '["resize", {"width": 1e9, "height": true}]',
                    '"\\ud800"',
                ):
                    await ws.send_str(junk)
                await ws.send_bytes(b"\x00" * 1000)
                await ws.send_json(["ping", "still there?"])
                pong = None
                while pong != ["pong", "still there?"]:  # what the viewer draws comes between
                    message = await ws.receive(timeout=30)
                    assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT)
                    if message.type == aiohttp.WSMsgType.TEXT:
                        pong = message.json()
                # SIGTERM with a session open (its viewer drawing).
                os.kill(server.pid, signal.SIGTERM)
                while True:
                    message = await ws.receive(timeout=30)
                    if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                        break

    try:
        _, port, token = address(first_line(server))
        asyncio.run(browse(port, token))
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert b"ProfilerStep" in drawn  # the tunnel's name and origin open a session
    assert len(first) == 1
    assert second_refused == 503  # --max-sessions 1
    assert first_gone  # the closed session's viewer, by its pid
    assert len(second) == 1 and second != first
    assert server.returncode == 0, err
    assert b"Traceback" not in out + err
    assert gone(second, timeout=5)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl+C"])
def test_stopped_while_a_session_starts_it_leaves_no_traceback(signum):
    import aiohttp

    server = start(str(SAMPLE), "--port", "0")
    viewers: set[int] = set()

    async def browse(url: str, port: int, token: str) -> None:
        nonlocal viewers
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"ws://127.0.0.1:{port}/ws/{token}", origin=url) as ws:
                viewers = await wait_for_viewer(server)
                os.kill(server.pid, signum)  # its viewer still loading
                while True:
                    message = await ws.receive(timeout=30)
                    if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                        break

    try:
        url, port, token = address(first_line(server))
        asyncio.run(browse(url, port, token))
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert len(viewers) == 1
    assert server.returncode == 0, err
    assert b"Traceback" not in out + err and b"Error" not in out + err
    assert gone(viewers, timeout=5)


def test_which_names_origins_and_sizes_are_answered():
    guard = Guard("127.0.0.1", None, printed="http://127.0.0.1:8000", token="T" * 32)
    for host in ("127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "localhost:9000"):
        assert guard.host_ok(host), host
    for host in (
        "evil.example:8000",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "",
        None,
        "10.0.0.1:8000",
        "[evil]:8000",
        "localhost:99999",
        "local host",
        "a@localhost",
    ):
        assert not guard.host_ok(host), host
    assert guard.origin_ok("http://127.0.0.1:8000", "127.0.0.1:8000")
    assert guard.origin_ok("http://localhost:9000", "localhost:9000")
    assert guard.origin_ok("http://[::1]", "[::1]:80")  # the default port, said or not
    for origin in (
        "http://evil.example",
        "http://127.0.0.1:8001",
        "https://127.0.0.1:8000",
        "null",
        "",
        None,
        "http://localhost:8000",
        "http://127.0.0.1:8000/x",
    ):
        assert not guard.origin_ok(origin, "127.0.0.1:8000"), origin
    assert not guard.origin_ok("http://evil.example:8000", "evil.example:8000")  # rebinding
    assert guard.token_ok("T" * 32)
    assert not guard.token_ok("T" * 31) and not guard.token_ok("") and not guard.token_ok("é")
    assert guard.url() == "http://127.0.0.1:8000/?token=" + "T" * 32
    assert guard.websocket_url("localhost:9000") == "ws://localhost:9000/ws/" + "T" * 32

    # Behind a TLS proxy: its name and https origin, and wss for its pages.
    proxied = Guard("127.0.0.1", "https://viewer.example.org", printed="http://127.0.0.1:8000")
    assert proxied.host_ok("viewer.example.org") and proxied.host_ok("127.0.0.1:8000")
    assert proxied.origin_ok("https://viewer.example.org", "viewer.example.org")
    assert not proxied.origin_ok("http://viewer.example.org", "viewer.example.org:443")
    assert proxied.websocket_url("viewer.example.org").startswith("wss://viewer.example.org/ws/")
    assert proxied.url().startswith("https://viewer.example.org/?token=")
    assert len(proxied.token) == 32 and proxied.token != Guard("::1", None, printed="").token

    # Every interface: any address literal is this machine's, but no other name.
    anywhere = Guard("0.0.0.0", None, printed="http://gpu-box-7:8000")
    assert anywhere.host_ok("10.0.0.1:8000") and anywhere.host_ok("gpu-box-7:8000")
    assert not anywhere.host_ok("evil.example:8000")
    named = Guard("gpu-box-7.lan", None, printed="http://gpu-box-7.lan:8000")
    assert named.host_ok("GPU-box-7.lan:8000") and not named.host_ok("10.0.0.1:8000")

    assert terminal_size({}) == (80, 24)
    assert terminal_size({"width": "500", "height": "200"}) == (MAX_WIDTH, MAX_HEIGHT)
    for query in (
        {"width": "501"},
        {"height": "201"},
        {"width": "0"},
        {"width": "-1"},
        {"width": "1e3"},
        {"width": "9" * 5000},
        {"height": "12.5"},
        {"width": ""},
    ):
        with pytest.raises(ValueError, match="a terminal of at most 500x200 cells"):
            terminal_size(query)
    # A browser's later resize: within the bound, whatever it asks.
    assert _resize({"width": 100000, "height": 100000}) == (MAX_WIDTH, MAX_HEIGHT)
    assert _resize({"width": 120, "height": 36}) == (120, 36)
    assert _resize({"width": -5, "height": 0}) == (1, 1)
    for data in (
        {"width": "120", "height": 36},
        {"width": True, "height": 1},
        [1, 2],
        None,
        {"width": 1.5, "height": 2},
        {"width": 10},
    ):
        assert _resize(data) is None, data


def test_a_public_url_is_checked_and_normalised(capsys):
    from kinetoscope.commands.serve import _public_url

    assert _public_url("HTTPS://Viewer.Example.org/") == "https://viewer.example.org"
    assert _public_url("http://[::1]:9000") == "http://[::1]:9000"
    for bad in (
        "viewer.example.org",
        "ftp://x",
        "https://x/path",
        "https://u@x",
        "https://x?a",
        "https://x:0",
        "https://x:70000",
        "https:// x",
    ):
        assert main(["serve", str(SAMPLE), "--public-url", bad]) == 2, bad
        err = capsys.readouterr().err
        assert "not an address like https://NAME or http://NAME:PORT" in err, bad
        assert "Traceback" not in err


def test_a_busy_port_is_one_line(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", str(SAMPLE), "--port", str(port)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        f"kinetoscope: port {port} on 127.0.0.1 is in use (another server?): pick another "
        "with --port N, or --port 0 for any free port"
    )


def test_without_textual_serve_it_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "textual_serve", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)
    assert main(["serve", str(SAMPLE)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "kinetoscope: serve needs textual-serve, an optional extra: "
        "pip install 'kinetoscope[serve]'\n"
    )


def test_inputs_are_checked_before_anything_is_served(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing.json")]) == 1
    assert capsys.readouterr().err.strip().endswith("missing.json: no such file")
    pftrace = tmp_path / "trace.pftrace"
    pftrace.write_bytes(b"\x0a\x04\x40\x01\x50\x01")  # a TracePacket: timestamp, sequence id
    assert main(["serve", str(pftrace)]) == 1
    assert "a Perfetto protobuf trace" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["serve", str(tmp_path / "empty")]) == 1  # a folder without a job
    assert "no trace files" in capsys.readouterr().err
    assert main(["serve", "--diff", str(SAMPLE)]) == 2
    assert "--diff compares two traces" in capsys.readouterr().err
    assert main(["serve", str(SAMPLE), "--port", "70000"]) == 2


def test_what_each_browser_tab_runs():
    sample = str(SAMPLE)
    assert viewer_command([sample]).endswith(f" -m kinetoscope view {sample}")
    assert viewer_command([sample, sample], diff=True).endswith(f"diff {sample} {sample}")
    assert viewer_command([str(SAMPLES)]).endswith(f"view {SAMPLES}")  # a job's folder
    assert viewer_command([str(SAMPLES)], cycle=1).endswith(f"view {SAMPLES} --cycle 1")
    assert viewer_command([sample]).startswith("exec ")  # the shell becomes the viewer


def test_a_non_local_address_is_warned_about():
    assert is_local("127.0.0.1") and is_local("::1") and is_local("localhost")
    assert not is_local("0.0.0.0") and not is_local("192.0.2.1")
    server = start(str(SAMPLE), "--host", "0.0.0.0", "--port", "0")
    try:
        line = first_line(server)
        found = re.search(r"on http://(\S+):(\d+)/\?token=(\S+) ", line)
        assert found, line
        name, port, token = found.groups()
        # The printed name (this machine's) is answered, as its address literals; no other.
        statuses = []
        for host in (f"{name}:{port}", f"192.0.2.1:{port}", f"evil.example:{port}"):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/?token={token}", headers={"Host": host}
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    statuses.append(response.status)
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
        assert statuses == [200, 200, 421]
    finally:
        code, out, err = stop(server, signal.SIGTERM)
    assert code == 0
    assert "warning: listening on 0.0.0.0, not only on this machine" in err
    assert "Traceback" not in out + err


STUCK_VIEWER = (
    # A viewer too busy to quit (as one drawing a huge terminal was): it ignores the quit
    # message and SIGTERM; only SIGKILL ends it.
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "sys.stdout.write('__GANGLION__\\n'); sys.stdout.flush(); time.sleep(120)"
)


def start_stuck_server() -> subprocess.Popen:
    """A server whose every session runs STUCK_VIEWER."""
    import shlex

    command = "exec " + shlex.join([sys.executable, "-c", STUCK_VIEWER])
    code = (
        "import sys; from kinetoscope.commands.serve import listen, serve; "
        f"sys.exit(serve({command!r}, listen('127.0.0.1', 0), '127.0.0.1', 'stuck'))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
    )


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_viewer_that_will_not_quit_is_killed_when_its_socket_closes_or_the_server_stops():
    import aiohttp

    server = start_stuck_server()
    closed: set[int] = set()
    closed_gone = False
    open_: set[int] = set()

    async def browse(url: str, port: int, token: str) -> None:
        nonlocal closed, closed_gone, open_
        ws_url = f"ws://127.0.0.1:{port}/ws/{token}"
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(ws_url, origin=url):
                closed = await wait_for_viewer(server)
            loop = asyncio.get_running_loop()
            closed_gone = await loop.run_in_executor(None, gone, closed)
            async with session.ws_connect(ws_url, origin=url) as ws:
                open_ = await wait_for_viewer(server)
                os.kill(server.pid, signal.SIGTERM)  # with a session whose viewer is stuck
                while True:
                    message = await ws.receive(timeout=30)
                    if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                        break

    try:
        url, port, token = address(first_line(server))
        asyncio.run(browse(url, port, token))
        out, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert len(closed) == 1 and closed_gone  # killed after its socket closed
    assert len(open_) == 1 and gone(open_, timeout=5)  # killed as the server stopped
    assert server.returncode == 0, err
    assert b"Traceback" not in out + err and b"Error" not in out + err


def test_behind_a_proxy_its_public_url_is_printed_answered_and_given_to_the_page():
    server = start(str(SAMPLE), "--port", "0", "--public-url", "https://Viewer.Example.org/")
    pages = []
    try:
        line = first_line(server)
        found = re.search(
            r"on https://viewer\.example\.org/\?token=([A-Za-z0-9_-]{32}) "
            r"\(listening on http://127\.0\.0\.1:(\d+); Ctrl\+C stops it\)",
            line,
        )
        assert found, line
        token, port = found.group(1), int(found.group(2))
        for host in ("viewer.example.org", f"127.0.0.1:{port}"):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/?token={token}", headers={"Host": host}
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                pages.append(websocket_url_of(response.read().decode()))
    finally:
        code, out, err = stop(server, signal.SIGTERM)
    assert pages == [f"wss://viewer.example.org/ws/{token}", f"ws://127.0.0.1:{port}/ws/{token}"]
    assert code == 0 and "Traceback" not in out + err


def test_a_session_frees_its_slot_once_its_viewer_is_reaped():
    """--max-sessions counts the viewers still running: one whose process has been reaped
    holds no slot, though its session's handler has not ended yet (the loop may not have heard
    of the exit: its returncode still None). A starting session (no process yet) holds one."""
    from types import SimpleNamespace

    from kinetoscope.commands.serve import _holds_slot

    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: its pid is gone
    try:
        unheard = SimpleNamespace(pid=ended.pid, returncode=None)  # the loop not yet told
        assert not _holds_slot(SimpleNamespace(process=unheard))
        assert not _holds_slot(SimpleNamespace(process=SimpleNamespace(pid=1, returncode=0)))
        assert _holds_slot(
            SimpleNamespace(process=SimpleNamespace(pid=running.pid, returncode=None))
        )
        assert _holds_slot(None) and _holds_slot(SimpleNamespace(process=None))  # starting
    finally:
        running.kill()
        running.wait()
