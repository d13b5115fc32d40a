"""One duration grammar: what goes into PromQL and what the daemon's config takes, from one table of units."""

from __future__ import annotations

import pytest

from exporter.duration import is_prometheus, lenient_seconds, prometheus_seconds


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("5m", 300), ("7d", 604800), ("2w", 1209600), ("250ms", 0.25)])
def test_prometheus_durations(text, seconds):
    assert is_prometheus(text) and prometheus_seconds(text) == pytest.approx(seconds)
    assert lenient_seconds(text) == pytest.approx(seconds)  # the config's form is a superset


@pytest.mark.parametrize("text", ["1.5m", "10", "5 m", "1m30s", "7days", ""])
def test_what_promql_would_refuse_is_refused_with_the_form_named(text):
    assert not is_prometheus(text)
    with pytest.raises(ValueError, match="expected a duration such as 7d"):
        prometheus_seconds(text)


def test_the_config_also_takes_decimals_and_bare_seconds():
    assert lenient_seconds("0.5s") == 0.5 and lenient_seconds("10") == 10.0 and lenient_seconds(" 2m ") == 120
    with pytest.raises(ValueError, match="expected a duration such as 5s"):
        lenient_seconds("soon")
