"""`kinetoscope serve`: the viewer in a web browser through textual-serve (issue 18).

The server is started as a user would, in its own process on a free localhost port (`--port 0`:
the port it took is in the line it prints); its page is fetched over HTTP, a browser's websocket
session is opened (the viewer draws the trace into it), and the server is stopped by its pid:
it exits cleanly, with no traceback, and takes its viewer processes with it."""

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
import urllib.request
from pathlib import Path

import pytest
from conftest import SAMPLES

from kinetoscope.cli import main
from kinetoscope.serve import is_local, viewer_command

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
        found = re.search(r"on (http://127\.0\.0\.1:(\d+)) \(Ctrl\+C stops it\)", line)
        assert found, line
        url, port = found.group(1), int(found.group(2))
        assert port != 0 and "demo_cpu.pt.trace.json.gz" in line
        with urllib.request.urlopen(url + "/", timeout=30) as response:
            assert response.status == 200
            page = response.read().decode()
        # The viewer's page: the app's name with the trace's, and textual-serve's terminal.
        assert "kinetoscope: demo_cpu.pt.trace.json.gz" in page
        assert "textual.js" in page and f"ws://127.0.0.1:{port}/ws" in page
    finally:
        code, out, err = stop(server)
    assert code == 0, err
    assert "Traceback" not in out + err
    with pytest.raises(OSError):  # the port is closed
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_browser_session_runs_the_viewer_and_ctrl_c_ends_it_too():
    import aiohttp

    server = start(str(SAMPLE), "--port", "0")
    viewers: set[int] = set()
    drawn = b""

    async def browse(url: str) -> None:
        nonlocal drawn, viewers
        async with aiohttp.ClientSession() as session:
            ws_url = url.replace("http://", "ws://") + "/ws?width=120&height=36"
            async with session.ws_connect(ws_url) as ws:
                await ws.send_json(["resize", {"width": 120, "height": 36}])
                deadline = time.monotonic() + START_S
                # The viewer's screen comes as the terminal's bytes: the trace's own names.
                while b"ProfilerStep" not in drawn and time.monotonic() < deadline:
                    try:
                        message = await ws.receive(timeout=1)
                    except asyncio.TimeoutError:
                        continue
                    if message.type == aiohttp.WSMsgType.BINARY:
                        drawn += message.data
                    elif message.type != aiohttp.WSMsgType.TEXT:
                        break
                viewers = children_of(server.pid)
                # Ctrl+C while the browser is still connected.
                os.kill(server.pid, signal.SIGINT)
                while True:
                    message = await ws.receive(timeout=30)
                    if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                        break

    try:
        found = re.search(r"on (http://\S+) ", first_line(server))
        assert found
        asyncio.run(browse(found.group(1)))
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
        assert re.search(r"on http://\S+:\d+ ", line), line
    finally:
        code, out, err = stop(server, signal.SIGTERM)
    assert code == 0
    assert "warning: listening on 0.0.0.0, not only on this machine" in err
    assert "Traceback" not in out + err
