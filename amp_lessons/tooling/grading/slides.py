"""Offline slide decks: each lesson as a reveal.js deck that loads nothing from the
internet (reveal.js and MathJax copied beside it), and a check that it really does not.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from html.parser import HTMLParser
from importlib.util import find_spec
from pathlib import Path

import nbformat

from amp_lessons.tooling.grading import deck_layout, slide_heights
from amp_lessons.tooling.grading.course import CELL_TIMEOUT_S, SLIDES_DIR, jupyter_env

# The stock reveal template loads jQuery, require.js, mermaid and reveal.js from CDNs.
# This one keeps its layout and CSS (inlined by nbconvert) and loads only local files.
SLIDES_TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{% block html_head_js %}{% endblock html_head_js %}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block html_head_js_mathjax %}
<script type="text/x-mathjax-config">
// jupyter-server-mathjax ships the STIX-Web fonts only
MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null,
                                 webFont: "STIX-Web", imageFont: null},
                    // Chromium draws MathJax's hidden MathML copy too: keep one
                    menuSettings: {assistiveMML: false}});
</script>
{{ super() }}
{% endblock html_head_js_mathjax %}
{% block html_head_css %}
<style type="text/css">
/* A fixed 1280 x 720 stage that reveal.js scales to the window, so a slide that fits
   here fits on any screen (deck_layout cuts the slides for this stage). No prompts:
   "In [12]:" costs a tenth of the width. */
.reveal .slides { text-align: left; }
.reveal .slides section:not(.stack) {
  height: 100%; overflow: hidden; box-sizing: border-box;
  padding: __PAD_Y__px __PAD_X__px;
}
.reveal .amp-fit { display: flow-root; }
.reveal .jp-InputPrompt, .reveal .jp-OutputPrompt { display: none; }
.reveal .jp-OutputArea-output img { max-height: __IMG_MAX_H__px; width: auto; }
.reveal div.jp-OutputArea-output > pre { width: auto; }  /* nbconvert's 90% wraps */
.reveal div.highlight > pre { box-sizing: border-box; }  /* its padding inside */
.reveal p.amp-continued { color: #777; font-style: italic; margin: 0 0 8px; }
</style>
{% endblock html_head_css %}
{% block footer_js %}
<script src="{{ resources.reveal.url_prefix }}/dist/reveal.js"></script>
<script src="{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({
  controls: true, progress: true, history: true, slideNumber: "c/t",
  transition: "{{ resources.reveal.transition }}",
  width: __STAGE_W__, height: __STAGE_H__, margin: 0, minScale: 0.2, maxScale: 3,
  center: false, plugins: [RevealNotes]
});
// A slide that still runs past the stage is shrunk to fit (CSS zoom), never below
// __MIN_ZOOM__: past that it would be hard to read, so it overflows and the deck test
// (tests/test_slides.py) fails instead.
function fitSlide(slide) {
  if (!slide || slide.classList.contains("stack")) return;
  let box = slide.querySelector(":scope > .amp-fit");
  if (!box) {
    box = document.createElement("div");
    box.className = "amp-fit";
    [...slide.childNodes].forEach((n) => {
      if (!(n.matches && n.matches("aside.notes"))) box.appendChild(n);
    });
    slide.insertBefore(box, slide.firstChild);
  }
  box.style.zoom = 1;
  const css = getComputedStyle(slide);
  const roomH = slide.clientHeight - parseFloat(css.paddingTop)
    - parseFloat(css.paddingBottom);
  const roomW = slide.clientWidth - parseFloat(css.paddingLeft)
    - parseFloat(css.paddingRight);
  const zoom = Math.max(__MIN_ZOOM__, Math.min(1, roomH / box.scrollHeight,
                                                roomW / box.scrollWidth));
  box.style.zoom = zoom;
  slide.dataset.ampZoom = zoom.toFixed(3);
}
// MathJax cannot measure math on hidden slides: lay it out again once it shows
// (queued, so it runs after MathJax's first pass whenever that ends), then refit
function showSlide() {
  const slide = Reveal.getCurrentSlide();
  fitSlide(slide);
  if (!(window.MathJax && MathJax.Hub)) return;
  if (slide.querySelector('script[type^="math/"]')) {
    MathJax.Hub.Queue(["Rerender", MathJax.Hub, slide]);
  }
  MathJax.Hub.Queue([fitSlide, slide]);  // after the first typesetting too
}
Reveal.on("ready", showSlide);
Reveal.on("slidechanged", showSlide);
document.addEventListener("load", (e) => {  // a picture decoded late
  if (e.target.tagName === "IMG") fitSlide(Reveal.getCurrentSlide());
}, true);
</script>
{% endblock footer_js %}
"""
for _name in ("STAGE_W", "STAGE_H", "PAD_X", "PAD_Y", "IMG_MAX_H", "MIN_ZOOM"):
    SLIDES_TEMPLATE = SLIDES_TEMPLATE.replace(
        f"__{_name}__", str(getattr(slide_heights, _name))
    )
ASSETS = "_assets"  # beside the .slides.html files
HANDOUT = "handout"  # the decks for students, in a folder of their own
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"  # one jupyter-server-mathjax ships
WIDGET_NOTE = "[interactive widget: open this lesson in JupyterLab to use it]"


def _package_dir(name: str, inside: str) -> Path:
    spec = find_spec(name)  # locates the files without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"{name} is not installed; it ships the {inside} the "
            "offline slides use: pip install -e '.[instructor]'"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def copy_slide_assets(out_dir: Path) -> Path:
    """Copy reveal.js (from sphinx-revealjs) and MathJax 2 (from jupyter-server-mathjax)
    into ``out_dir/_assets``: the decks need no network.

    Example: ``copy_slide_assets(Path("build/slides"))`` -> ``build/slides/_assets``
    with ``reveal.js/dist/reveal.js`` and ``mathjax/MathJax.js``.
    """
    reveal = _package_dir("sphinx_revealjs", "reveal.js") / "_static" / "revealjs"
    mathjax = _package_dir("jupyter_server_mathjax", "MathJax") / "static"
    assets = Path(out_dir) / ASSETS
    shutil.rmtree(assets, ignore_errors=True)
    keep = [
        "dist/reveal.js",
        "dist/reveal.css",
        "dist/reset.css",
        "dist/theme/white.css",
        "plugin/notes/notes.js",
        "LICENSE",
    ]
    for rel in keep:
        (assets / "reveal.js" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(reveal / rel, assets / "reveal.js" / rel)
    shutil.copytree(
        reveal / "dist/theme/fonts/source-sans-pro",
        assets / "reveal.js/dist/theme/fonts/source-sans-pro",
    )
    shutil.copytree(mathjax, assets / "mathjax")
    return assets


def slides_exporter():
    """An nbconvert SlidesExporter that points every script and style at ``_assets``."""
    from nbconvert import SlidesExporter
    from traitlets.config import Config

    # deck_layout tags the cells that show a cut-off output without its code again
    config = Config(
        {
            "TagRemovePreprocessor": {
                "enabled": True,
                "remove_input_tags": {slide_heights.OUTPUT_ONLY},
            }
        }
    )
    return SlidesExporter(
        config=config,
        raw_template=SLIDES_TEMPLATE,
        reveal_url_prefix=f"{ASSETS}/reveal.js",
        reveal_theme="white",  # its font ships locally; "simple" imports Google Fonts
        reveal_transition="none",
        mathjax_url=f"{ASSETS}/mathjax/MathJax.js?config={MATHJAX_CONFIG}",
        embed_images=True,
    )


def _without_live_widgets(nb):
    """Widgets need a kernel (or a CDN script): show a note in their place."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                output["data"] = {"text/plain": WIDGET_NOTE}
    return nb


def execute_notebooks(notebooks: Sequence[Path], out_dir: Path) -> list[Path]:
    """Run the notebooks (one nbconvert call; each runs in its own folder, so its
    ``results/`` resolves) and write the executed copies into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [Path(p).resolve() for p in notebooks]
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        f"--ExecutePreprocessor.timeout={CELL_TIMEOUT_S}",
        f"--output-dir={out_dir.resolve()}",
        *map(str, paths),
    ]
    result = subprocess.run(
        command, env=jupyter_env(out_dir), capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(
            "a notebook failed to execute for the slides:\n"
            f"{(result.stdout + result.stderr)[-4000:]}"
        )
    return [out_dir / p.name for p in paths]


def export_slides(
    notebooks: Sequence[Path],
    out_dir: Path = SLIDES_DIR,
    execute: bool = False,
    handout: bool = False,
) -> list[Path]:
    """``jupyter nbconvert --to slides`` for each notebook, offline, into ``out_dir``.

    With ``execute=True`` each lesson runs first, so the deck shows what this machine
    measured; otherwise the deck shows the code only. Open ``NN_x.slides.html`` in a
    browser: arrows move, ``s`` opens the speaker notes. With ``handout=True``, a
    second deck of each lesson goes into ``out_dir/handout/`` (with its own assets,
    to zip alone): no solution, no check's output, no speaker notes.

    Example: ``export_slides(course_notebooks())`` ->
    ``[build/slides/00_welcome.slides.html, ...]``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    copy_slide_assets(out_dir)
    sources = list(map(Path, notebooks))
    if execute:
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            ran = execute_notebooks(sources, Path(tmp))
            nbs = [nbformat.read(p, as_version=4) for p in ran]
    else:
        nbs = [nbformat.read(p, as_version=4) for p in sources]
    exporter = slides_exporter()
    decks = [
        export_deck(nb, path.stem, out_dir, exporter)
        for path, nb in zip(sources, nbs, strict=True)
    ]
    if handout:
        copy_slide_assets(out_dir / HANDOUT)
        decks += [
            export_deck(nb, path.stem, out_dir / HANDOUT, exporter, handout=True)
            for path, nb in zip(sources, nbs, strict=True)
        ]
    return decks


def export_deck(
    nb, name: str, out_dir: Path, exporter=None, handout: bool = False
) -> Path:
    """One lesson (a notebook node, executed or not) as ``out_dir/<name>.slides.html``,
    laid out by ``deck_layout`` (as a handout: without solutions); ``out_dir`` needs
    the assets (`copy_slide_assets`).
    """
    exporter = exporter or slides_exporter()
    deck = deck_layout.lay_out_deck(
        _without_live_widgets(copy.deepcopy(nb)), handout=handout
    )
    body, _ = exporter.from_notebook_node(deck, {"metadata": {"name": name}})
    dest = Path(out_dir) / f"{name}.slides.html"
    dest.write_text(body, encoding="utf-8")
    return dest


class _Links(HTMLParser):
    """Collects the URLs a page loads: script src, link href, img src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "img", "iframe", "source") and attrs.get("src"):
            self.urls.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.urls.append(attrs["href"])


_REMOTE = re.compile(r"^(https?:)?//", re.I)
_CSS_REMOTE = re.compile(r"(@import\s+(url\()?|url\()\s*['\"]?(https?:)?//", re.I)


def offline_problems(html: Path) -> list[str]:
    """What a slide deck would fetch from the network, or miss on disk (empty: fine).

    Checks every script, stylesheet and image the page loads, the inline styles, and
    the local stylesheets it links (for remote ``@import``/``url()``).
    """
    html = Path(html)
    text = html.read_text(encoding="utf-8")
    parser = _Links()
    parser.feed(text)
    problems = []
    for url in parser.urls:
        if _REMOTE.match(url):
            problems.append(f"{html.name} loads {url} from the network")
        elif not url.startswith(("data:", "#")):
            local = html.parent / url.split("?")[0].split("#")[0]
            if not local.exists():
                problems.append(f"{html.name} loads {url}, missing at {local}")
            elif local.suffix == ".css" and _CSS_REMOTE.search(local.read_text()):
                problems.append(
                    f"{local.name} (linked by {html.name}) imports a "
                    "remote stylesheet or font"
                )
    for style in re.findall(r"<style[^>]*>(.*?)</style>", text, re.S | re.I):
        if _CSS_REMOTE.search(style):
            problems.append(f"{html.name}: an inline style imports from the network")
    return problems
