"""`seedlog-sim timeline` in a real browser: the page of a recorded failing history (the
ack-before-fsync plant losing acknowledged writes to a power loss, sim/tests/fixtures/) rendered
by headless Chromium from Debian's packages. Checks the screenshot (its size, and the highlight
colour of the lost writes actually painted) and the DOM Chromium built (the violation list, the
anchors of the highlighted operations).

Skipped when chromium is not installed, unless SEEDLOG_REQUIRE_CHROMIUM=1 (.ci/run sets it and
installs chromium). Needs the simulator binary (target/sim/release/seedlog-sim, built by
scripts/test.sh's sim-build step; or SEEDLOG_SIM_BIN)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "sim/tests/fixtures/lost-write-ack-before-fsync.jsonl"
SCENARIO = REPO / "scenarios/durability/slow-disk-power-loss.toml"
REQUIRED = os.environ.get("SEEDLOG_REQUIRE_CHROMIUM") == "1"
# The outline of operations a violation names (.hl in sim/src/timeline/draw.rs).
HIGHLIGHT = (0xFF, 0x00, 0x40)


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


if chromium() is None and REQUIRED:
    raise RuntimeError("chromium is required here (SEEDLOG_REQUIRE_CHROMIUM=1) but not installed")
pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")


def sim_binary() -> Path:
    configured = os.environ.get("SEEDLOG_SIM_BIN")
    binary = Path(configured) if configured else REPO / "target/sim/release/seedlog-sim"
    if not binary.is_file():
        message = f"no simulator binary at {binary}: run `cargo sim build --release -p seedlog-sim`"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    return binary


def browser(page: Path, profile: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(chromium()),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1600,1000",
        *arguments,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)


def png_pixels(path: Path) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, unfiltered scanlines without their filter bytes) of an
    8-bit RGB or RGBA PNG, decoded with the standard library."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, idat, header = 8, b"", None
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    out = bytearray(stride * height)
    previous = bytearray(stride)
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous))
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b, c = previous[i], previous[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                predictor = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + predictor) & 0xFF
        out[row * stride : (row + 1) * stride] = line
        previous = line
    return width, height, channels, bytes(out)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("timeline")
    output = directory / "run.html"
    subprocess.run(
        [str(sim_binary()), "timeline", str(FIXTURE), "-o", str(output), "--scenario", str(SCENARIO)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return output


def test_chromium_paints_the_lost_writes_highlighted(page: Path, tmp_path: Path) -> None:
    screenshot = tmp_path / "timeline.png"
    browser(page, tmp_path / "profile", f"--screenshot={screenshot}")
    assert screenshot.is_file() and screenshot.stat().st_size > 20_000
    width, height, channels, pixels = png_pixels(screenshot)
    assert (width, height) == (1600, 1000)
    colours = {pixels[i : i + 3] for i in range(0, len(pixels), channels * 97)}
    assert len(colours) > 20, f"a near-blank page: {len(colours)} colours"
    highlighted = sum(
        1
        for i in range(0, len(pixels), channels)
        if abs(pixels[i] - HIGHLIGHT[0]) < 24 and pixels[i + 1] < 40 and abs(pixels[i + 2] - HIGHLIGHT[2]) < 40
    )
    assert highlighted > 1000, f"only {highlighted} pixels of the highlight colour"


def test_chromium_builds_the_violation_list_and_the_anchors(page: Path, tmp_path: Path) -> None:
    dom = browser(page, tmp_path / "profile", "--dump-dom").stdout
    assert "<svg" in dom and 'id="timeline"' in dom
    assert re.search(r'<b class="check unexpected">lost-write</b> 1-1119 acknowledged at ledger-0@552', dom), dom[:2000]
    linked = set(re.findall(r'<a href="#op-(\d+)">', dom))
    anchored = set(re.findall(r'<rect id="op-(\d+)" class="hl"', dom))
    assert linked, "no links to operations"
    assert linked <= anchored, f"links without a highlighted operation: {sorted(linked - anchored)}"
    # The sends of the five lost values, invocation and acknowledgement, are among them.
    for value in ("1-1119", "1-1120", "1-1122", "1-1123", "1-1124"):
        assert re.search(rf'<a href="#op-\d+">#\d+ p1 send ok {value} → ledger-0@55\d', dom), value
