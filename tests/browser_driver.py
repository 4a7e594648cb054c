"""Drive a notebook's widgets in a real JupyterLab page, the way a student does.

`tests/test_browser.py` uses this on the course's widget notebooks and on a scratch
fixture. The detector is generic: it finds every slider, dropdown, toggle/radio button,
checkbox and number box rendered in a cell's output, moves each one step away and back,
and watches the cell's output with a MutationObserver in the page until its plot (every
<img>, <canvas> and plot <svg>) has changed and stayed still. Nothing here knows the
course's widgets, so a new widget is covered as soon as a notebook displays it.

Example:
    page.goto(lab.url("/lab/tree/01_number_formats.ipynb", with_token=True))
    open_and_run(page, expected_code_cells=20)
    results = exercise_cell(page, cell_index=7)   # [Move(...), ...]
    assert_redrew(results)
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# Controls a student can move. Their own text (a slider's readout, a dropdown's
# choice) is left out of the "numbers shown" comparison: it changes by itself.
CONTROLS = (
    ".widget-slider, .widget-dropdown, .widget-toggle-buttons, .widget-radio, "
    ".widget-checkbox, .widget-text, .widget-textarea"
)

NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in front
IDLE = ".jp-Notebook-ExecutionIndicator[data-status='idle']"  # its kernel, idle
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'

# In-page helpers, installed once per page load: a signature of a cell's output
# (hashes of what the plots draw, and the numbers printed outside the controls) and a
# watcher that timestamps every change of it after an input event.
JS_HELPERS = r"""
() => {
  if (window.__amp) return;
  const CONTROLS = __CONTROLS__;
  const hash = (s) => {
    let h = 0;
    for (let i = 0; i < s.length; i++) h = (Math.imul(h, 31) + s.charCodeAt(i)) | 0;
    return s.length + ':' + (h >>> 0).toString(16);
  };
  const cells = () => document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell');
  const scope = (i) => cells()[i].querySelector('.jp-Cell-outputWrapper');
  const signature = (node) => {
    const plots = [];
    node.querySelectorAll('img').forEach((img) => plots.push('img ' + hash(img.src)));
    node.querySelectorAll('canvas').forEach((c) => {
      try { plots.push('canvas ' + hash(c.toDataURL())); } catch (e) {}
    });
    node.querySelectorAll('svg').forEach((svg) => {
      // JupyterLab's own icons (collapse overlay, buttons) are not plots
      if (!svg.closest('[data-icon], .jp-OutputArea-promptOverlay, button')
          && !svg.hasAttribute('data-icon')) plots.push('svg ' + hash(svg.outerHTML));
    });
    const texts = [];
    const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const parent = walker.currentNode.parentElement;
      if (parent && !parent.closest(CONTROLS) && !parent.closest('.jp-OutputPrompt'))
        texts.push(walker.currentNode.nodeValue);
    }
    const numbers = (texts.join(' ').match(/[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?/gi)
                     || []).join(' ');
    return {plots: plots.join('|'), numbers, nplots: plots.length};
  };
  const watch = (i) => {
    const node = scope(i);
    const before = signature(node);
    const w = {before, t0: null, tInstall: performance.now(), changes: []};
    const onInput = () => { if (w.t0 === null) w.t0 = performance.now(); };
    const types = ['keydown', 'change', 'input', 'pointerdown', 'click'];
    types.forEach((t) => document.addEventListener(t, onInput, true));
    let last = before.plots + '#' + before.numbers;
    const check = () => {
      const s = signature(node);
      const key = s.plots + '#' + s.numbers;
      if (key !== last) { last = key; w.changes.push({t: performance.now(), s}); }
    };
    w.observer = new MutationObserver(check);
    w.observer.observe(node, {subtree: true, childList: true, attributes: true,
                              characterData: true});
    w.stop = () => {
      w.observer.disconnect();
      types.forEach((t) => document.removeEventListener(t, onInput, true));
    };
    window.__ampWatch = w;
  };
  // settled: the plot differs from before and nothing changed for `quiet` ms
  const settled = (quiet) => {
    const w = window.__ampWatch;
    if (!w.changes.length) return false;
    const last = w.changes[w.changes.length - 1];
    return last.s.plots !== w.before.plots && last.s.nplots > 0
      && performance.now() - last.t >= quiet;
  };
  const finish = () => {
    const w = window.__ampWatch;
    w.stop();
    const t0 = w.t0 === null ? w.tInstall : w.t0;
    const final = w.changes.length ? w.changes[w.changes.length - 1].s : w.before;
    const first = (pred) => {
      const c = w.changes.find(pred);
      return c ? c.t - t0 : null;
    };
    return {
      plot_changed: final.plots !== w.before.plots && final.nplots > 0,
      numbers_changed: final.numbers !== w.before.numbers,
      plot_ms: first((c) => c.s.plots === final.plots
                     && final.plots !== w.before.plots),
      numbers_ms: first((c) => c.s.numbers === final.numbers
                        && final.numbers !== w.before.numbers),
      numbers_before: w.before.numbers, numbers_after: final.numbers,
      mutations: w.changes.length,
    };
  };
  window.__amp = {signature, watch, settled, finish, scope, cells};
}
""".replace("__CONTROLS__", repr(CONTROLS))


@dataclass
class Move:
    """One move of one control and what the cell's output did about it."""

    cell: int
    kind: str
    label: str
    action: str
    value_before: str
    value_after: str
    plot_changed: bool = False
    numbers_changed: bool = False
    plot_ms: float | None = None
    numbers_ms: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def moved(self) -> bool:
        return self.value_before != self.value_after

    def __str__(self) -> str:
        ms = "-" if self.plot_ms is None else f"{self.plot_ms:.0f} ms"
        return (
            f"cell {self.cell} {self.kind} '{self.label}' {self.action}: "
            f"{self.value_before!r} -> {self.value_after!r}, plot "
            f"{'redrawn' if self.plot_changed else 'UNCHANGED'} ({ms}), numbers "
            f"{'changed' if self.numbers_changed else 'unchanged'}"
            + (f", ERRORS {self.errors}" if self.errors else "")
        )


def install_helpers(page) -> None:
    page.evaluate(JS_HELPERS)


def watch_requests(page) -> list[str]:
    """A list that fills with every URL the page requests from off this machine."""
    off_machine: list[str] = []

    def check(request) -> None:
        host = urlsplit(request.url).hostname
        if request.url.startswith(("http:", "https:", "ws:", "wss:")) and host not in (
            "127.0.0.1",
            "localhost",
            "::1",
        ):
            off_machine.append(request.url)

    page.on("request", check)
    return off_machine


def dismiss_toasts(page) -> None:
    """Close notification toasts (the news question) that can cover the notebook."""
    for button in page.locator(".jp-Notification-Toast-Close").all():
        try:
            button.click(timeout=2000)
        except Exception:
            pass  # already gone


# Each code cell's prompt text, or "hidden" where its input is collapsed (the proof
# cells): JupyterLab then shows a placeholder, whose prompt never gets a number.
PROMPTS = """() => [...document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')].map((c) => {
      if (c.querySelector('.jp-InputPlaceholder')) return 'hidden';
      const p = c.querySelector('.jp-InputPrompt');
      return p ? p.textContent.trim() : '';
    })"""


def open_and_run(page, expected_code_cells: int, timeout_s: float = 300) -> float:
    """Run all cells from the Run menu; wait until each code cell whose input shows
    has its number and the kernel has been idle for a second.

    Returns the seconds the run took. JupyterLab 4 keeps every cell in the DOM
    (content-visibility windowing), so the prompts can all be counted.
    """
    idle = f"{NOTEBOOK} {IDLE}"
    page.wait_for_selector(idle, timeout=120_000)
    dismiss_toasts(page)
    start = time.monotonic()
    click_run_all(page)
    try:
        page.wait_for_function(
            f"""(n) => {{
              const p = ({PROMPTS})();
              return p.length === n && p.every((t) => t === 'hidden'
                                               || /^\\[\\d+\\]:$/.test(t));
            }}""",
            arg=expected_code_cells,
            timeout=timeout_s * 1000,
            polling=250,
        )
        # collapsed cells after the last shown one may still run: idle, and still
        # idle a second later (between two queued cells it flickers idle)
        for _ in range(int(timeout_s)):
            page.wait_for_selector(idle, timeout=timeout_s * 1000)
            page.wait_for_timeout(1000)
            if page.locator(idle).count():
                break
    except Exception as error:
        raise AssertionError(
            f"Run All did not finish in {timeout_s:.0f} s: expected "
            f"{expected_code_cells} code cells, numbered where shown; prompts are "
            f"{page.evaluate(PROMPTS)}"
        ) from error
    wait_for_widgets(page)
    install_helpers(page)
    dismiss_toasts(page)
    return time.monotonic() - start


def click_run_all(page, attempts: int = 5) -> None:
    """Run > Run All Cells, once the item is enabled and until a cell starts.

    Right after the page loads the item can still be disabled (the notebook is not
    yet the current widget); a click then does nothing, so check and retry.
    """
    started = f"""() => ({PROMPTS})().some((t) => /^\\[(\\d+|\\*)\\]:$/.test(t))"""
    for _ in range(attempts):
        # a click in the notebook makes it the current widget, as a student's would
        notebook = ".jp-NotebookPanel:not(.lm-mod-hidden)"
        page.locator(f"{notebook} .jp-InputPrompt").first.click()
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        item = page.locator('.lm-Menu-item[data-command="runmenu:run-all"]')
        item.wait_for(timeout=10_000)
        if "lm-mod-disabled" in (item.get_attribute("class") or ""):
            page.keyboard.press("Escape")
            page.wait_for_timeout(1000)
            continue
        item.click()
        try:
            page.wait_for_function(started, timeout=15_000, polling=100)
            return
        except Exception:
            continue  # nothing started: the click fell on a menu being rebuilt
    raise AssertionError(
        f"Run > Run All Cells did not start the notebook after {attempts} tries"
    )


def wait_for_widgets(page, timeout_s: float = 60) -> None:
    """Until no output still says "Loading widget..." (views render asynchronously)."""
    page.wait_for_function(
        """() => ![...document.querySelectorAll('.jp-OutputArea-output')]
              .some((e) => e.textContent.trim() === 'Loading widget...')""",
        timeout=timeout_s * 1000,
        polling=200,
    )
    page.wait_for_timeout(500)  # let the first draws land


def error_outputs(page, cell: int | None = None) -> list[str]:
    """Tracebacks and widget render failures shown in the notebook (or one cell)."""
    return page.evaluate(
        """([cell, stderr]) => {
          const cells = [...document.querySelectorAll(
            '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')];
          const roots = cell === null ? cells : [cells[cell]];
          const found = [];
          roots.forEach((root, k) => {
            const index = cell === null ? k : cell;
            root.querySelectorAll(stderr).forEach((e) => {
              const text = e.textContent;
              if (/Traceback|\\w+Error\\b|Exception/.test(text))
                found.push(`cell ${index}: ` + text.slice(0, 600));
            });
            root.querySelectorAll('.jp-OutputArea-output').forEach((e) => {
              if (/^Error displaying widget/.test(e.textContent.trim()))
                found.push(`cell ${index}: ` + e.textContent.trim());
            });
          });
          return found;
        }""",
        [cell, STDERR],
    )


def stderr_texts(page) -> list[str]:
    """Every stderr output (warnings included), for the report."""
    return page.evaluate(
        "(sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent)", STDERR
    )


def widget_cells(page) -> list[int]:
    """Indices of the cells whose outputs hold at least one movable control."""
    return page.evaluate(
        """(controls) => [...document.querySelectorAll(
              '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')]
            .map((c, i) => [i, c.querySelector('.jp-Cell-outputWrapper')])
            .filter(([i, o]) => o && o.querySelector(controls)).map(([i]) => i)""",
        CONTROLS,
    )


def cell_locator(page, index: int):
    return page.locator(
        ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell"
    ).nth(index)


def controls_of(page, index: int):
    return cell_locator(page, index).locator(".jp-Cell-outputWrapper").locator(CONTROLS)


def control_kind(control) -> str:
    classes = control.get_attribute("class") or ""
    for kind in (
        "slider",
        "dropdown",
        "toggle-buttons",
        "radio",
        "checkbox",
        "textarea",
        "text",
    ):
        if f"widget-{kind}" in classes.split():
            return kind
    return "unknown"


def control_label(control) -> str:
    """The description a student reads next to the control (a checkbox's own text)."""
    for selector in (".widget-label", ".widget-label-basic"):
        label = control.locator(selector).first
        text = (label.text_content() or "") if label.count() else ""
        text = text.replace("\u200b", "").strip()  # ipywidgets' empty label
        if text:
            return text
    return "(no description)"


def control_value(control, kind: str) -> str:
    if kind == "slider":
        readout = control.locator(".widget-readout")
        if readout.count():
            return (readout.first.text_content() or "").strip()
        return control.locator(".noUi-handle").first.get_attribute("aria-valuenow")
    if kind == "dropdown":
        return control.locator("select").input_value()
    if kind == "toggle-buttons":
        return control.locator("button.mod-active").first.text_content() or ""
    if kind == "radio":
        checked = control.locator("input:checked")
        return checked.first.get_attribute("value") if checked.count() else ""
    if kind == "checkbox":
        return str(control.locator("input").is_checked())
    if kind in ("text", "textarea"):
        return control.locator("input, textarea").first.input_value()
    return ""


def planned_actions(control, kind: str) -> list[tuple[str, object]]:
    """One step away from the current value and back again (both must redraw).

    Small steps on purpose: a control's extreme can be expensive (the speed panel at
    its largest width) and a step is what a student does first.
    """
    if kind == "slider":
        handle = control.locator(".noUi-handle").first
        now = float(handle.get_attribute("aria-valuenow"))
        top = float(handle.get_attribute("aria-valuemax"))
        away, back = (
            ("ArrowLeft", "ArrowRight") if now >= top else ("ArrowRight", "ArrowLeft")
        )
        return [("key", away), ("key", back)]
    if kind == "dropdown":
        select = control.locator("select")
        options = select.locator("option").evaluate_all(
            "(os) => os.map((o) => o.value)"
        )
        current = select.input_value()
        if len(options) < 2:
            return []
        other = options[(options.index(current) + 1) % len(options)]
        return [("select", other), ("select", current)]
    if kind in ("toggle-buttons", "radio"):
        items = control.locator("button" if kind == "toggle-buttons" else "input")
        n = items.count()
        if n < 2:
            return []
        if kind == "radio":
            chosen = [items.nth(i).is_checked() for i in range(n)]
        else:
            chosen = [
                "mod-active" in (items.nth(i).get_attribute("class") or "")
                for i in range(n)
            ]
        active = chosen.index(True) if True in chosen else 0
        return [("click", (active + 1) % n), ("click", active)]
    if kind == "checkbox":
        return [("toggle", None), ("toggle", None)]
    if kind == "text":
        box = control.locator("input").first
        current = box.input_value()
        try:
            number = float(current)
        except ValueError:
            return []  # free text: no generic "next value" to type
        other = repr(number * 2 if number else 1.0)
        return [("type", other), ("type", current)]
    return []


def perform(page, control, kind: str, action: str, arg) -> None:
    if action == "key":
        handle = control.locator(".noUi-handle").first
        handle.focus()
        page.keyboard.press(arg)
    elif action == "select":
        control.locator("select").select_option(arg)
    elif action == "click":
        items = control.locator("button" if kind == "toggle-buttons" else "input")
        items.nth(arg).click()
    elif action == "toggle":
        control.locator("input").click()
    elif action == "type":
        box = control.locator("input").first
        box.fill(arg)
        box.press("Enter")


def exercise_cell(
    page, cell_index: int, timeout_s: float = 15, quiet_ms: int = 400
) -> list[Move]:
    """Move every control in one cell's output (away and back); record what redrew."""
    moves = []
    controls = controls_of(page, cell_index)
    for k in range(controls.count()):
        control = controls.nth(k)
        if control.locator("[disabled], .noUi-target[disabled]").count():
            continue
        control.scroll_into_view_if_needed()
        kind = control_kind(control)
        label = control_label(control)
        for action, arg in planned_actions(control, kind):
            errors_before = set(error_outputs(page, cell_index))
            value_before = control_value(control, kind)
            page.evaluate("(i) => window.__amp.watch(i)", cell_index)
            perform(page, control, kind, action, arg)
            try:
                page.wait_for_function(
                    "(q) => window.__amp.settled(q)",
                    arg=quiet_ms,
                    timeout=timeout_s * 1000,
                    polling=50,
                )
            except Exception:  # playwright's TimeoutError: reported as "unchanged"
                pass
            seen = page.evaluate("() => window.__amp.finish()")
            move = Move(
                cell_index,
                kind,
                label,
                f"{action} {arg}",
                value_before,
                control_value(control, kind),
                seen["plot_changed"],
                seen["numbers_changed"],
                seen["plot_ms"],
                seen["numbers_ms"],
            )
            move.errors = sorted(set(error_outputs(page, cell_index)) - errors_before)
            moves.append(move)
    return moves


def assert_redrew(moves: list[Move], max_ms: float = 3000) -> None:
    """Every move moved its control, redrew its plot within `max_ms`, raised nothing."""
    assert moves, "no slider, dropdown or button was found to move"
    stuck = [str(m) for m in moves if not m.moved]
    assert not stuck, "controls that did not move:\n" + "\n".join(stuck)
    broken = [str(m) for m in moves if m.errors]
    assert not broken, "moves that raised:\n" + "\n".join(broken)
    frozen = [str(m) for m in moves if not m.plot_changed]
    assert not frozen, "plots that did not redraw:\n" + "\n".join(frozen)
    slow = [str(m) for m in moves if m.plot_ms is not None and m.plot_ms > max_ms]
    assert not slow, f"redraws slower than {max_ms} ms:\n" + "\n".join(slow)


def fastest_of(runs: list[list[Move]]) -> list[Move]:
    """The same moves made several times (``exercise_cell`` again and again): each
    move's fastest redraw. On a shared machine one slow redraw can be another
    program's doing; the fastest of a few is the widget's own time.

    Example: runs of [away 250 ms, back 400 ms] and [away 310 ms, back 220 ms] give
    [away 250 ms, back 220 ms].
    """
    best = []
    for same in zip(*runs, strict=True):
        timed = [m for m in same if m.plot_ms is not None]
        best.append(min(timed, key=lambda m: m.plot_ms) if timed else same[0])
    return best


def layout_problems(page, cell_index: int) -> list[str]:
    """What a student would struggle to read: widget parts sticking out of the cell's
    output area, table columns with no gap between their texts, plots shrunk to fit."""
    return page.evaluate(
        """(i) => {
          const cell = window.__amp.cells()[i];
          const area = cell.querySelector('.jp-Cell-outputArea');
          const box = area.getBoundingClientRect();
          const found = [];
          if (area.scrollWidth > area.clientWidth + 1)
            found.push(`output scrolls sideways: ${area.scrollWidth}px content in `
                       + `${area.clientWidth}px`);
          area.querySelectorAll('.jupyter-widgets *').forEach((e) => {
            const r = e.getBoundingClientRect();
            if (r.width > 0 && r.right > box.right + 2)
              found.push(`${e.tagName.toLowerCase()}.${[...e.classList].join('.')} `
                         + `ends at ${Math.round(r.right)}px, cell at `
                         + `${Math.round(box.right)}px`);
          });
          // table cells whose texts touch read as one number ("...0111" + "9.99e-05")
          const textBox = (el) => {
            const range = document.createRange();
            range.selectNodeContents(el);
            const rects = [...range.getClientRects()].filter((r) => r.width > 0);
            if (!rects.length) return null;
            return {left: Math.min(...rects.map((r) => r.left)),
                    right: Math.max(...rects.map((r) => r.right))};
          };
          area.querySelectorAll('.jupyter-widgets table tr').forEach((tr) => {
            const cells = [...tr.children];
            for (let k = 0; k + 1 < cells.length; k++) {
              const a = textBox(cells[k]), b = textBox(cells[k + 1]);
              if (a && b && b.left - a.right < 4)
                found.push(`table cells touch (${Math.round(b.left - a.right)}px): `
                           + `"${cells[k].textContent.trim().slice(-16)}" | `
                           + `"${cells[k + 1].textContent.trim().slice(0, 16)}"`);
            }
          });
          area.querySelectorAll('img').forEach((img) => {
            if (img.naturalWidth && img.clientWidth < 0.75 * img.naturalWidth)
              found.push(`plot shown at ${img.clientWidth}px of its `
                         + `${img.naturalWidth}px: text in it shrinks`);
          });
          return [...new Set(found)].slice(0, 30);
        }""",
        cell_index,
    )


def screenshot_cell(page, index: int, path) -> None:
    """The whole cell, however tall: the page grows to fit it, at the same width.

    An element screenshot alone stops at the window's bottom edge, since the cell
    scrolls inside JupyterLab's notebook panel, not the page.
    """
    viewport = page.viewport_size
    cell = cell_locator(page, index)
    height = cell.evaluate("(e) => e.getBoundingClientRect().height")
    page.set_viewport_size(
        {
            "width": viewport["width"],
            "height": max(viewport["height"], int(height) + 300),
        }
    )
    try:
        cell.scroll_into_view_if_needed()
        cell.screenshot(path=path)
    finally:
        page.set_viewport_size(viewport)
