"""The guard's signed channel: each report is one line, ``HMAC-SHA256 hex + " " +
JSON``, written at once to the FIFO the grader reads from outside the sandbox.

``make_sender`` signs and numbers the records and caps how many there are and how
long each value is; ``make_text_readers`` turns an event's arguments into the text a
record keeps without running any code of theirs; ``open_channel`` writes to the FIFO
and opens it again if student code closes or replaces its descriptor. The key never
reaches student code, so a line it forges does not verify (``sandbox.verify_records``)
and is itself evidence.

Example::

    send = make_sender(key, open_channel(fifo))
    send({"kind": "hello", "pid": 42})
    # writes b'<64 hex digits> {"kind":"hello","pid":42,"seq":1}\\n'

Not covered here: what goes into a record (the other modules of ``guard``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

MAX_RECORDS = 400  # evidence lines per notebook; later ones are dropped
TEXT_LIMIT = 300  # characters of one string in a record
LIST_LIMIT = 20  # items of one list in a record


# Each make_* runs before student code; the functions it returns use only what it
# bound then (builtins included, as locals): never a global (tests/test_sandbox.py).


def make_sender(
    key: bytes, write: Callable[[bytes], None], max_records: int = MAX_RECORDS
) -> Callable[[dict], None]:
    """``send(record)``: writes one line, ``HMAC-SHA256(key) hex + " " + JSON``, with
    the record's ``seq`` (1, 2, ...) added; after ``max_records`` lines the rest are
    dropped. Values are written as JSON when they are bool, int, str (cut to
    TEXT_LIMIT characters), None or a list of those (cut to LIST_LIMIT items), and
    as ``"?"`` otherwise."""
    import _hashlib
    import _json

    _type, _str, _int, _list = type, str, int, list
    hmac_digest, quote = _hashlib.hmac_digest, _json.encode_basestring_ascii
    text_limit, list_limit = TEXT_LIMIT, LIST_LIMIT
    sent = [0]

    def encode(value) -> str:
        if value is True or value is False:
            return "true" if value else "false"
        if _type(value) is _int:
            return _str(value)
        if _type(value) is _str:
            return quote(value[:text_limit])
        if _type(value) is _list:
            return "[" + ",".join([encode(v) for v in value[:list_limit]]) + "]"
        if value is None:
            return "null"
        return quote("?")

    def send(record: dict) -> None:
        if sent[0] >= max_records:
            return
        sent[0] += 1
        record["seq"] = sent[0]
        payload = (
            "{"
            + ",".join([quote(k) + ":" + encode(v) for k, v in record.items()])
            + "}"
        )
        data = payload.encode()
        write((hmac_digest(key, data, "sha256").hex() + " ").encode() + data + b"\n")

    return send


def make_text_readers() -> tuple[Callable, Callable]:
    """``(text, clipped)``: ``text(value)`` is a str as it is, bytes decoded (UTF-8,
    errors replaced), an int in digits, anything else ``"<object>"`` (so no code of
    the value's own runs); ``clipped(value)`` is its first TEXT_LIMIT characters, all
    a record keeps, decoding no more bytes than those need (``marshal.loads`` gets a
    whole module's bytecode)."""
    _type, _str, _bytes, _int = type, str, bytes, int
    text_limit = TEXT_LIMIT
    byte_limit = 4 * TEXT_LIMIT + 4  # a UTF-8 character is at most 4 bytes

    def text(value) -> str:
        if _type(value) is _str:
            return value
        if _type(value) is _bytes:
            return value.decode("utf-8", "replace")
        if _type(value) is _int:
            return _str(value)
        return "<object>"

    def clipped(value) -> str:
        if _type(value) is _bytes:
            value = value[:byte_limit]
        return text(value)[:text_limit]

    return text, clipped


def open_channel(fifo: str) -> Callable[[bytes], None]:
    """``write(data)``: writes ``data`` to the FIFO, opening it again first when its
    descriptor was closed or now names another file (student code did it)."""
    os_open, os_write, os_fstat = os.open, os.write, os.fstat
    flags, _OSError = os.O_WRONLY | os.O_CLOEXEC, OSError
    fd = os_open(fifo, flags)
    first = os_fstat(fd)

    def write(data: bytes) -> None:
        nonlocal fd
        try:
            now = os_fstat(fd)
            if (now.st_ino, now.st_dev) != (first.st_ino, first.st_dev):
                raise _OSError("replaced")
        except _OSError:  # closed or replaced by student code: open it again
            fd = os_open(fifo, flags)
        os_write(fd, data)

    return write
