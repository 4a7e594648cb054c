"""Lesson 09's GAN step, seen from its calls: the faults one iteration's calls show
(as `RecordingScaler` notes them, watching the discriminator as "d" and the
generator as "g"), each said with why it is one and never with the line to write.

Example:
    >>> calls = ["scale", "backward:d", "step:d", "scale", "backward:d",
    ...          "backward:g", "step:g", "update", "update"]
    >>> gan_fault_hint([calls], finished=True)[:40]
    "the scaler's update ran 2 times in one i"
"""

from __future__ import annotations

from amp_lessons.i18n import N_, _

__all__ = ["gan_fault_hint"]


# What each fault did wrong and why, named from the calls the student's iteration made
# (`RecordingScaler`, watching D as "d" and G as "g"); never the line to write.
_GAN_FAULTS = {
    "second_scaler": N_(
        "the generator's half went through a second scaler, not the one given: an "
        "overflow in G no longer backs off the given scaler, the two scales drift "
        "apart (a scaler made inside the step even starts again at 65536 every "
        "call), and both must be saved. One scaler serves both losses."),
    "direct_step": N_(
        "{opt}.step() ran directly: it steps on gradients still multiplied by the "
        "scale and never skips an inf/NaN step. The scaler's own step unscales, "
        "checks, then steps or skips."),
    "unscaled_backward": N_(
        "the {net}'s loss went backward unscaled: fp16 flushes its small gradients "
        "to zero on the way back, and the scaler's step then divides the true "
        "gradients by the scale. Backward starts from the scaled loss."),
    "no_backward": N_(
        "no backward reached the {net}: its optimizer had no gradients to step with."),
    "no_step": N_(
        "{opt} never stepped: the {net} does not learn."),
    "g_first": N_(
        "the generator was stepped before the discriminator: D trains first, on a "
        "detached fake, then G through the updated D."),
    "update_first": N_(
        "the scaler's update ran before the steps of this iteration: it acts on the "
        "inf checks the steps make, and there were none yet. One update ends the "
        "iteration, after both steps."),
    "two_updates": N_(
        "the scaler's update ran {count} times in one iteration: the growth tracker "
        "counts every iteration twice, so the scale grows twice as often. One update "
        "per iteration, after both steps."),
    "no_update": N_(
        "the scaler's update never ran: the scale never changes (no back-off after "
        "an overflow, no growth), and the next iteration's step is refused. One "
        "update ends each iteration."),
    "unscale_twice": N_(
        "unscale_ ran twice on {opt} in one iteration (or after its step): the "
        "second would divide its gradients by the scale again, so torch refuses it. "
        "The scaler's step unscales by itself."),
    "stale_grads": N_(
        "the {net}'s gradients from the previous iteration were still there when "
        "this iteration's backward reached it: backward adds to .grad, so {opt} "
        "stepped on the sum of two iterations' gradients. Each half starts from "
        "cleared gradients."),
    "fake_not_detached": N_(
        "the discriminator's loss went backward into the generator as well: the "
        "fake points it judged were still attached to G, so that backward also "
        "freed G's graph, which the generator's loss needs next (torch refuses a "
        "second backward through it). The discriminator's half judges fake points "
        "detached from G."),
    "g_backward_before_d_step": N_(
        "the generator's loss went backward before the discriminator stepped: "
        "that backward runs through D too and adds to D's gradients, so D stepped "
        "on the sum of both losses' gradients. D steps before G's loss goes "
        "backward."),
    "returned_scaled": N_(
        "the step returned a scaled loss (loss times the scale): the losses the "
        "iteration reports are the ones before scaling."),
}  # fmt: skip
_NET = {"d": N_("discriminator"), "g": N_("generator")}
_OPT = {"d": "opt_d", "g": "opt_g"}


def _backwards(calls: list[str]) -> list[tuple[set[str], bool]]:
    """Each backward of an iteration: the networks it reached, and whether it ran
    from a scaled loss. One backward notes each network it reaches, in a row."""
    found: list[tuple[set[str], bool]] = []
    in_row = False
    for call in calls:
        kind, _sep, net = call.partition(":")
        if kind == "stale_grads":  # noted inside a backward, just before it reached
            continue
        if kind not in ("backward", "backward_unscaled"):
            in_row = False
            continue
        if not in_row or net in found[-1][0]:
            found.append((set(), True))
        in_row = True
        found[-1][0].add(net)
        if kind == "backward_unscaled":
            found[-1] = (found[-1][0], False)
    return found


def _net_faults(calls: list[str], net: str, reached_end: bool) -> list[tuple]:
    stepped = f"step:{net}" in calls or f"optimizer.step:{net}" in calls
    faults: list[tuple] = []
    owner = [b for b in _backwards(calls) if ("g" in b[0]) == (net == "g")]
    if any(not scaled for _reached, scaled in owner):
        faults.append(("unscaled_backward", net))
    elif not owner and (reached_end or stepped):
        faults.append(("no_backward", net))
    if f"optimizer.step:{net}" in calls:
        faults.append(("direct_step", net))
    elif not stepped and reached_end:
        faults.append(("no_step", net))
    unscale = f"unscale_:{net}"
    if calls.count(unscale) > 1 or (
        f"step:{net}" in calls and unscale in calls[calls.index(f"step:{net}") :]
    ):
        faults.append(("unscale_twice", net))
    return faults


def _order_faults(calls: list[str], steps: list[str]) -> list[tuple]:
    """Faults of the order of D's and G's backwards: D's loss reaching G (the fake
    points not detached), G's loss going backward into D before D's step."""
    backwards = _backwards(calls)
    first_step = calls.index(steps[0]) if steps else len(calls)
    faults: list[tuple] = []
    if backwards and backwards[0][0] == {"d", "g"} and steps[:1] != ["step:g"]:
        faults.append(("fake_not_detached", ""))
    d_steps = [c for c in steps if c.endswith(":d")]
    if d_steps and steps[0] == d_steps[0]:
        into_d = [b for b in _backwards(calls[:first_step]) if "d" in b[0]]
        if len(into_d) > 1 and "g" in into_d[-1][0]:
            faults.append(("g_backward_before_d_step", ""))
    return faults


def _gan_faults(calls: list[str], finished: bool) -> list[tuple]:
    """The faults ((key of `_GAN_FAULTS`, network)) of one iteration's `calls`.
    `finished`: it returned; when it raised, what it never reached is not missing."""
    reached_end = finished or "update" in calls
    if "other_scaler" in calls:
        return [("second_scaler", "g")]
    steps = [c for c in calls if c.partition(":")[0] in ("step", "optimizer.step")]
    faults: list[tuple] = _order_faults(calls, steps)
    faults += [("stale_grads", c.partition(":")[2]) for c in calls
               if c.startswith("stale_grads:")]  # fmt: skip
    if "update" in calls and (not steps or calls.index("update") < calls.index(
            steps[0])):  # fmt: skip
        faults.append(("update_first", ""))
    faults += _net_faults(calls, "d", reached_end)
    faults += _net_faults(calls, "g", reached_end)
    if steps and steps[0].endswith(":g") and any(s.endswith(":d") for s in steps):
        faults.append(("g_first", ""))
    if calls.count("update") > 1:
        faults.append(("two_updates", ""))
    elif finished and "update" not in calls:
        faults.append(("no_update", ""))
    if "returned_scaled" in calls:
        faults.append(("returned_scaled", ""))
    return faults


def gan_fault_hint(trace: list[list[str]], finished: bool) -> str:
    """The hint for the first iteration of `trace` that shows a fault (at most two
    of its faults, each with why), or "" when none does."""
    for i, calls in enumerate(trace):
        faults = _gan_faults(calls, finished or i < len(trace) - 1)
        if faults:
            first = {}  # a fault both networks show is said once, for the first
            for key, net in faults:
                first.setdefault(key, net)
            said = [_(_GAN_FAULTS[key]).format(opt=_OPT.get(net, ""),
                    net=_(_NET[net]) if net else "", count=calls.count("update"))
                    for key, net in list(first.items())[:2]]  # fmt: skip
            return " ".join(said)
    return ""
