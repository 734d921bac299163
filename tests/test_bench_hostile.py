"""A result file is written only when it reads back: what `Result` accepts, `load_result`
accepts; what the reader takes (a lone surrogate, a repeated key) is what a writer writes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt.bench import (
    BenchError,
    BenchFormatError,
    Outcome,
    OutcomeClass,
    Result,
    Taxonomy,
    Trial,
    load_result,
    trial_from_run,
)
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from test_bench import TAX, result, trial


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"steps": -1}, "trials[0].steps is -1, not an integer from 0 to 2^63-1"),
        ({"wall_ms": 1.5}, "trials[0].wall_ms is 1.5"),
        ({"tool_calls": True}, "trials[0].tool_calls is True"),
        ({"cost_micros": 2**64}, "trials[0].cost_micros is 18446744073709551616"),
        ({"repeat": -3}, "trials[0].repeat is -3"),
        ({"model": ""}, "trials[0].model is empty"),
        ({"scenario": "s" * 300}, "trials[0].scenario is longer than 256 characters"),
        ({"mode": "v1\ud800"}, "trials[0].mode holds a lone surrogate"),
    ],
)
def test_a_trial_the_file_could_not_hold_is_refused_before_anything_is_written(
    tmp_path: Path, fields: dict[str, Any], says: str
) -> None:
    values = {"scenario": "s", "mode": "v1", "model": "m", "repeat": 0, "run_id": "r"}
    values.update(fields)
    with pytest.raises(BenchError) as caught:
        Result(TAX, "abc", (Trial(outcome="refunded", **values),))
    assert says in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"commit": ""}, "commit is empty"),
        ({"commit": "c" * 300}, "commit is longer than 256 characters"),
        ({"label": "\ud800"}, "label holds a lone surrogate"),
        ({"created_at": 5}, "created_at is 5, not text"),
    ],
)
def test_a_result_whose_texts_the_file_could_not_hold_is_refused(
    fields: dict[str, Any], says: str
) -> None:
    values: dict[str, Any] = {"commit": "abc", "trials": (trial("v1", "refunded"),)}
    values.update(fields)
    with pytest.raises(BenchError) as caught:
        Result(TAX, **values)
    assert says in str(caught.value)


def test_every_result_that_can_be_made_is_written_and_read_back_equal(tmp_path: Path) -> None:
    top = 2**63 - 1
    r = Result(
        TAX,
        "c" * 256,
        (trial("v1 \u2028\ufeff\U0010ffff", "refunded", steps=top, cost_micros=top, wall_ms=0),),
        created_at="2026-12-01T00:00:00+00:00",
        label="<&>\x00",
    )
    r.write(tmp_path / "r.json")
    assert load_result(tmp_path / "r.json") == r
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_result_that_cannot_be_put_in_place_leaves_no_temporary_file(tmp_path: Path) -> None:
    r = Result(TAX, "abc", (trial("v1", "refunded"),))
    target = tmp_path / "r.json"
    target.mkdir()  # a directory where the file would go: the rename fails
    with pytest.raises(OSError):
        r.write(target)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert target.is_dir() and list(target.iterdir()) == []


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda t: t.replace('"steps": 0', '"steps": 0, "steps": 5', 1), 'repeated key "steps"'),
        (lambda t: t.replace('"label": ""', '"label": "\\ud800"', 1), "lone surrogate U+D800"),
        (lambda t: t.replace('"steps": 0', '"steps": NaN', 1), "NaN is not a JSON value"),
    ],
)
def test_a_file_with_a_repeated_key_a_lone_surrogate_or_nan_is_refused(
    tmp_path: Path, edit: Any, says: str
) -> None:
    text = json.dumps(result(trial("v1", "refunded")).to_json(), indent=1)
    path = tmp_path / "r.json"
    path.write_text(edit(text))
    with pytest.raises(BenchFormatError) as caught:
        load_result(path)
    assert str(caught.value).startswith(f"{path}: not JSON")
    assert says in str(caught.value)


@pytest.mark.parametrize("wall_ms", [math.nan, math.inf, -math.inf, 2**64])
def test_a_trial_from_a_run_with_an_unusable_wall_time_is_refused_with_a_bench_error(
    db_path: Path, wall_ms: Any
) -> None:
    with agentrt.open_store(db_path) as store:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([agentrt.Decision.complete("ok")]),
            policy=agentrt.default_policy(),
            tools=[],
            now=FakeClock(),
            new_id=Ids(),
        )
        run = driver.start_sync("nothing")
        with pytest.raises(BenchError, match=r"wall_ms .* not an integer from 0 to 2\^63-1"):
            trial_from_run(
                store,
                run.id,
                scenario="s",
                mode="v1",
                model="m",
                repeat=0,
                outcome="refunded",
                wall_ms=wall_ms,
            )


@pytest.mark.parametrize(
    ("description", "says"),
    [
        ("d" * 300, "description is longer than 256 characters"),
        ("\udfff", "description holds a lone surrogate U+DFFF"),
        (7, "description is 7, not text"),
    ],
)
def test_a_taxonomy_whose_description_the_file_could_not_hold_is_refused(
    description: Any, says: str
) -> None:
    with pytest.raises(BenchError) as caught:
        Taxonomy(
            "refunds",
            (
                Outcome("refunded", OutcomeClass.SUCCESS, description),
                Outcome("wrong", OutcomeClass.UNSAFE),
            ),
        )
    assert says in str(caught.value)
