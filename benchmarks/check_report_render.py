"""Render a release's report.html in headless Chromium and check that the plots are really there.

Usage: ``python benchmarks/check_report_render.py RELEASE_FOLDER [--screenshot out.png]``

Checks, as a person looking at the page would:

1. the HTML holds the expected number of ``<img>`` tags whose data URIs decode to valid PNGs;
2. Chromium renders the page to a screenshot (``--headless --screenshot``) that is not blank:
   several horizontal bands of the page each contain many distinct colours.

Chromium is an optional dependency used only by this check (``apt-get install chromium``);
without it, the script says so and exits 2.
"""

from __future__ import annotations

import argparse
import base64
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["embedded_pngs", "render", "screenshot_bands", "main"]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def find_chromium() -> str | None:
    for c in CHROMIUM_CANDIDATES:
        if Path(c).is_file():
            return c
    return shutil.which("chromium") or shutil.which("chromium-browser")


def embedded_pngs(html: str) -> list[np.ndarray]:
    """Every ``<img src="data:image/png;base64,...">`` decoded to an RGB array.

    Raises if an image is not a valid PNG.
    """
    import io

    import matplotlib.image as mpimg

    images = []
    for data in re.findall(r'<img[^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html):
        raw = base64.b64decode(data, validate=True)
        if not raw.startswith(PNG_MAGIC):
            raise ValueError("an <img> data URI is not a PNG")
        images.append(mpimg.imread(io.BytesIO(raw), format="png"))
    return images


def render(
    html_path: Path, png_path: Path, chromium: str, *, width: int = 1400, height: int = 3000
) -> None:
    """Screenshot ``html_path`` with headless Chromium."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--screenshot={png_path}",
            f"--window-size={width},{height}",
            html_path.resolve().as_uri(),
        ]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    if not png_path.is_file():
        raise RuntimeError(f"chromium wrote no screenshot to {png_path}")


def screenshot_bands(png_path: Path, bands: int = 6) -> list[int]:
    """Distinct colours in each horizontal band of the screenshot's non-white part."""
    import matplotlib.image as mpimg

    img = (mpimg.imread(png_path)[..., :3] * 255).astype(np.uint8)
    rows = np.flatnonzero((img < 250).any(axis=(1, 2)))
    if rows.size == 0:
        return [0] * bands
    content = img[rows[0] : rows[-1] + 1]
    out = []
    for band in np.array_split(content, bands, axis=0):
        flat = band.reshape(-1, 3)
        out.append(
            len(
                np.unique(
                    flat[:, 0].astype(np.int32) << 16
                    | flat[:, 1].astype(np.int32) << 8
                    | flat[:, 2]
                )
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", type=Path, help="release folder holding report.html")
    parser.add_argument(
        "--screenshot", type=Path, help="where to keep the screenshot (default: a temp file)"
    )
    parser.add_argument("--min-images", type=int, default=4, help="plots the report must embed")
    args = parser.parse_args(argv)
    html_path = args.release / "report.html"
    images = embedded_pngs(html_path.read_text(encoding="utf-8"))
    print(
        f"{len(images)} embedded PNG plot(s): "
        + ", ".join(f"{i.shape[1]}x{i.shape[0]}" for i in images)
    )
    if len(images) < args.min_images:
        print(f"FAIL: expected at least {args.min_images} plots")
        return 1
    chromium = find_chromium()
    if chromium is None:
        print("chromium not found (apt-get install chromium): screenshot check skipped")
        return 2
    shot = args.screenshot or Path(tempfile.mkdtemp()) / "report.png"
    render(html_path, shot, chromium)
    bands = screenshot_bands(shot)
    print(f"screenshot {shot}: distinct colours per band {bands}")
    if min(bands) < 20:
        print("FAIL: part of the rendered page is blank")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
