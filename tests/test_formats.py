"""Line formats: detection, CRI and docker unwrapping, partial lines, caps, broken bytes."""

from __future__ import annotations

import io
import json

from exporter.logs.formats import LineDecoder, detect_format, read_lines


def _texts(data: bytes, fmt: str = "auto", cap: int = 64 * 1024) -> tuple[str, list[str]]:
    detected, lines = read_lines(io.BytesIO(data), fmt, cap)
    return detected, [line.text for line in lines]


def test_detects_each_format():
    assert detect_format(b"INFO 08-16 12:00:01 [core.py:1] hi\n") == "plain"
    assert detect_format(b"\n\n2026-08-16T12:00:01.123456789Z stderr F hi\n") == "cri"
    assert detect_format(b'{"log":"hi\\n","stream":"stderr","time":"2026-08-16T12:00:01Z"}\n') == "docker"
    assert detect_format(b"{not json at all\n") == "plain"
    assert detect_format(b"") == "plain"


def test_cri_partial_lines_are_joined_and_keep_first_number():
    data = (
        b"2026-08-16T12:00:01.1Z stderr P torch.OutOfMem\n"
        b"2026-08-16T12:00:01.2Z stderr P oryError: CUDA out\n"
        b"2026-08-16T12:00:01.3Z stderr F  of memory.\n"
        b"2026-08-16T12:00:02Z stdout F next\n"
    )
    fmt, lines = read_lines(io.BytesIO(data))
    lines = list(lines)
    assert fmt == "cri"
    assert [line.text for line in lines] == ["torch.OutOfMemoryError: CUDA out of memory.", "next"]
    assert lines[0].number == 1 and lines[1].number == 4
    assert lines[0].time == "2026-08-16T12:00:01.1Z"


def test_cri_empty_message_and_unwrapped_line():
    data = b"2026-08-16T12:00:01Z stderr F\nsomeone wrote this by hand\n"
    assert _texts(data)[1] == ["", "someone wrote this by hand"]


def test_docker_split_pieces_are_joined():
    pieces = ["INFO 08-16 12:00:01 [core.py:1] ", "a long line", " ends here\n"]
    data = "".join(json.dumps({"log": p, "stream": "stderr", "time": "2026-08-16T12:00:01Z"}) + "\n" for p in pieces)
    assert _texts(data.encode())[1] == ["INFO 08-16 12:00:01 [core.py:1] a long line ends here"]


def test_docker_garbled_record_is_kept_not_dropped():
    data = b'{"log":"ok\\n","stream":"stderr"}\n{"log":"cut in the mid\n{"log":"after\\n"}\n'
    fmt, texts = _texts(data)
    assert fmt == "docker"
    assert texts[0] == "ok" and texts[-1] == "after"
    assert len(texts) == 3


def test_over_long_line_is_cut_and_reading_goes_on():
    data = b"A" * 1_000_000 + b"\nINFO 08-16 12:00:01 [core.py:1] after\n"
    detected, lines = read_lines(io.BytesIO(data), "plain", 4096)
    lines = list(lines)
    assert len(lines[0].text) == 4096 and lines[0].truncated
    assert lines[1].text.endswith("after") and lines[1].number == 2


def test_over_long_partial_chain_is_capped():
    dec = LineDecoder("cri", max_line_bytes=100)
    for i in range(1000):
        assert dec.feed(b"2026-08-16T12:00:01Z stderr P " + b"x" * 50, i + 1) is None
    line = dec.feed(b"2026-08-16T12:00:01Z stderr F end", 1001)
    assert len(line.text) == 100 and line.truncated and line.number == 1


def test_invalid_utf8_and_ansi_colours():
    data = b"\x1b[32mINFO\x1b[0m 08-16 12:00:01 [core.py:1] caf\xe9 \xff\xfe ok\n"
    texts = _texts(data)[1]
    assert texts == ["INFO 08-16 12:00:01 [core.py:1] caf\ufffd \ufffd\ufffd ok"]


def test_file_ending_mid_line_and_crlf():
    data = b"first\r\nsecond without newline"
    assert _texts(data)[1] == ["first", "second without newline"]
    cri = b"2026-08-16T12:00:01Z stderr P dangling partial"
    assert _texts(cri)[1] == ["dangling partial"]
