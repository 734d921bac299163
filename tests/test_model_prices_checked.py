"""A price is integer micro-dollars, never negative (attack on model accounting; decision
0159).

`Price(...)` took any values: a negative price made every attempt's cost negative (the
store clamps the totals at zero, so a cost limit never held), a float made costs floats,
text made `cost_micros` repeat strings or raise `TypeError` mid-run (the run ended
`agent_error`). A `PriceTable` took any values as prices. Both are refused when built.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrt import ConfigError
from agentrt._model import Price, PriceTable


@pytest.mark.parametrize(
    "fields",
    [
        (-1, 0, None),
        (0, -1, None),
        (0, 0, -1),
        (1.5, 0, None),
        ("5", 0, None),
        (True, 0, None),
        (0, 0, 2.0),
    ],
    ids=[
        "negative-input",
        "negative-output",
        "negative-cached",
        "float",
        "text",
        "bool",
        "float-cached",
    ],
)
def test_a_price_that_is_not_non_negative_integer_micros_is_refused(fields: Any) -> None:
    with pytest.raises(ConfigError, match="Price"):
        Price(*fields)


def test_valid_prices_are_kept() -> None:
    assert Price(3, 15).cost_micros is not None
    assert Price(0, 0, None) == Price(0, 0)
    assert Price.per_million("5", "$0.50", "0.1") == Price(5_000_000, 500_000, 100_000)


@pytest.mark.parametrize(
    "prices",
    [{"m": "5"}, {"m": None}, {7: Price.free()}, ["m"]],
    ids=["text", "none", "int-name", "not-a-mapping"],
)
def test_a_price_table_of_anything_but_prices_by_name_is_refused(prices: Any) -> None:
    with pytest.raises(ConfigError, match="PriceTable"):
        PriceTable(prices)
