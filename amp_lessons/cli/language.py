"""The command line's language: the locale's, or --lang's, chosen before the parser is
built; and argparse speaking it (its headings, -h's help and its usual errors).

Example: ``LANG=es_ES.UTF-8 python -m amp_lessons train --help`` or ``python -m
amp_lessons --lang es train --help`` prints the help in Spanish.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence

from amp_lessons.i18n import LANGUAGES, N_, _

# -- the language: the locale's, or --lang's; set before anything is printed --
LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")  # gettext's order
LANGUAGE_NAMES = {"en": N_("English"), "es": N_("Spanish")}


def environment_language(environ=None) -> str:
    """The language the locale asks for, read as gettext reads it: the first set of
    LANGUAGE (a list, ``fr:es``), LC_ALL, LC_MESSAGES and LANG. ``es_ES.UTF-8`` ->
    ``"es"``; English when it names no language the package speaks (fr_FR, C)."""
    environ = os.environ if environ is None else environ
    for variable in LOCALE_VARIABLES:
        if environ.get(variable):
            for entry in environ[variable].split(":"):
                code = re.split(r"[_.@-]", entry, maxsplit=1)[0].lower()
                if code in LANGUAGES:
                    return code
            return "en"
    return "en"


def language_code(text: str) -> str:
    """An argparse type for --lang: en or es."""
    if text.lower() not in LANGUAGES:
        choices = ", ".join(f"{code} ({_(LANGUAGE_NAMES[code])})" for code in LANGUAGES)
        raise argparse.ArgumentTypeError(
            _("unsupported language {value}; use one of: {choices}").format(
                value=repr(text), choices=choices
            )
        )
    return text.lower()


def flag_language(argv: Sequence[str]) -> str | None:
    """The language --lang asks for in `argv` (the last one), read before the parser is
    built: its help is written in it. None without one, or for a language the package
    does not speak (the parser then says so)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--lang="):
            found = arg.partition("=")[2]
    return found.lower() if found and found.lower() in LANGUAGES else None


# -- argparse in the package's language --
# argparse words its help and errors through its own gettext domain, which nobody
# translates: its headings and the -h help go through our catalogue in the formatter,
# and its usual error messages are re-worded by pattern (one it does not know stays
# as argparse wrote it). Our own help text is translated where the parser is built.
ARGPARSE_HEADINGS = (N_("options"), N_("positional arguments"))
ARGPARSE_HELP = N_("show this help message and exit")
ARGPARSE_ARGUMENT = re.compile(r"argument (?P<flag>\S+?): (?P<message>.*)", re.S)
ARGPARSE_ERRORS = tuple(
    (re.compile(pattern, re.S), template)
    for pattern, template in (
        (
            r"invalid choice: (?P<value>.*) \(choose from (?P<choices>.*)\)",
            N_("invalid choice: {value} (choose from {choices})"),
        ),
        (
            r"invalid (?P<type>\w+) value: (?P<value>.*)",
            N_("invalid {type} value: {value}"),
        ),
        (r"expected one argument", N_("expected one argument")),
        (r"expected at least one argument", N_("expected at least one argument")),
        (
            r"the following arguments are required: (?P<names>.*)",
            N_("the following arguments are required: {names}"),
        ),
        (
            r"unrecognized arguments: (?P<names>.*)",
            N_("unrecognized arguments: {names}"),
        ),
        (
            r"ambiguous option: (?P<option>\S+) could match (?P<matches>.*)",
            N_("ambiguous option: {option} could match {matches}"),
        ),
    )
)


def argparse_message(message: str) -> str:
    """One of argparse's error messages in the package's language, where it is one of
    the usual ones (``argument --iters: invalid int value: 'x'``); else as it is."""
    match = ARGPARSE_ARGUMENT.fullmatch(message)
    if match:
        return _("argument {flag}: {message}").format(
            flag=match["flag"], message=argparse_message(match["message"])
        )
    for pattern, template in ARGPARSE_ERRORS:
        match = pattern.fullmatch(message)
        if match:
            return _(template).format(**match.groupdict())
    return message


class LocalizedHelpFormatter(argparse.HelpFormatter):
    """argparse's help with its own words (usage:, options, -h's help) translated."""

    def add_usage(self, usage, actions, groups, prefix=None):
        super().add_usage(
            usage, actions, groups, _("usage: ") if prefix is None else prefix
        )

    def start_section(self, heading):
        super().start_section(_(heading) if heading in ARGPARSE_HEADINGS else heading)

    def _get_help_string(self, action):  # argparse's documented override point
        help_text = super()._get_help_string(action)
        return _(help_text) if help_text == ARGPARSE_HELP else help_text


class OneLineParser(argparse.ArgumentParser):
    """argparse, reporting a usage mistake in one line like every other mistake, in
    the package's language."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", LocalizedHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's hook; it must not return
        self.exit(
            2,
            _("error: {message} (see {prog} --help)").format(
                message=argparse_message(message), prog=self.prog
            )
            + "\n",
        )


def add_lang_option(p: argparse.ArgumentParser) -> None:
    """--lang, on the main parser and on each command's."""
    # SUPPRESS: absent, it sets nothing (a subcommand's default would overwrite the
    # main parser's --lang); main() has read it from argv already
    p.add_argument(
        "--lang",
        type=language_code,
        default=argparse.SUPPRESS,
        metavar="{en,es}",
        help=_(
            "the language of the help, the log and the errors: en or es "
            "(default: the locale's, from LANGUAGE, LC_ALL, LC_MESSAGES "
            "or LANG; English when it is neither)"
        ),
    )
