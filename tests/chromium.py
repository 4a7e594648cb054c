"""Chromium for the browser tests (tests/test_browser.py, test_slides.py, test_site.py,
test_grading.py): found on the machine, driven by Playwright, skipped without it
(failed under CI)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

import pytest

CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium_path() -> str | None:
    """$CHROMIUM if set, else Debian's `chromium` on PATH; None when absent."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium")
    return path if path and os.path.isfile(path) else None


def require_browser() -> None:
    """Skip without Chromium or Playwright; under CI=true, fail instead."""
    missing = []
    if not chromium_path():
        missing.append("Chromium (`apt-get install chromium`)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (`pip install -e .[dev]`)")
    if not missing:
        return
    message = "the browser test needs " + " and ".join(missing)
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + "; CI must install it (see .ci/run)", pytrace=False)
    pytest.skip(message)


@contextlib.contextmanager
def launch_chromium():
    """Debian's Chromium under Playwright (skips, or fails under CI, without it)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    args = list(CHROMIUM_ARGS)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium's sandbox refuses to run as root
    # Chromium writes caches (fontconfig, crash reports) under HOME: give it a
    # throwaway one, like the server's
    with (
        tempfile.TemporaryDirectory(prefix="amp-chromium-") as home,
        sync_playwright() as p,
    ):
        env = {
            **os.environ,
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_CACHE_HOME": f"{home}/.cache",
        }
        browser = p.chromium.launch(executable_path=chromium_path(), args=args, env=env)
        yield browser
        browser.close()
