"""Models that never call a provider: scripted, recording and replaying.

This module owns the replay contract of models.md: a `ScriptedModel` plays a
fixed list of responses; a `Recorder` wraps a real `Model` and writes every
attempt's outcome to a directory; a `Replayer` plays those recordings back by
request, so tests and examples replay real conversations without a provider.

- **The key** of a request is the lowercase hex SHA-256 of the canonical JSON of
  `{"model": name, "request": request.to_json()}`, number literals kept
  (`request_key`). One file per key, `<key>.json`.
- **Sequences.** Identical requests (same key) are recorded in order and
  replayed in order; asking a `Replayer` for more than was recorded raises
  `ReplayMissError` naming the key. A `Recorder` instance is one recording
  session: the first time it records a key it starts that key's sequence afresh
  (replacing whatever an earlier session recorded for it), later attempts with
  the same key append.
- **Fidelity.** A response keeps the provider's raw bytes byte-identical
  (base64 in the file). Failures are recorded too, so a replayed run charges and
  retries exactly like the recorded one: `TransientModelError` (with
  `retry_after`), `ServedModelError` (with its usage), timeouts and lost
  connections, and any other exception as one of the same class name. An
  attempt cancelled while in flight (the accounting caller's call timeout) is
  recorded as `cancelled` and replayed as `TimeoutError()`, which is exactly
  what the caller saw when its timeout fired.
- **Files** are written owner-only (0600, the directory 0700 when created here)
  through a temp file in the same directory, fsync, rename, and an fsync of the
  directory, so a reader sees the old sequence or the new one, never half.

See docs/decisions/0009-replay-and-render.md for the choices the spec leaves open.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import math
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from ._canonical import canonical_json, from_text, policy_json
from ._durable import fsync_directory
from ._errors import (
    AgentrtError,
    ModelUnavailableError,
    ServedModelError,
    TransientModelError,
)
from ._foreign import type_name
from ._model import Model, ModelRequest, ModelResponse, ToolUseBlock, Usage

__all__ = [
    "FORMAT",
    "RecordedModelError",
    "Recorder",
    "RecordingError",
    "ReplayError",
    "ReplayMissError",
    "Replayer",
    "ScriptExhaustedError",
    "ScriptedModel",
    "request_key",
    "response_from_json",
    "response_to_json",
]

FORMAT = "agentrt.replay/1"
"""The `format` field of every recording file; any other is refused."""

ScriptEntry = ModelResponse | BaseException | Callable[[ModelRequest], ModelResponse]


class ReplayError(AgentrtError):
    """A scripted or replaying model cannot answer this request."""


class ScriptExhaustedError(ReplayError):
    """A `ScriptedModel` was asked for more responses than its script holds."""


class ReplayMissError(ReplayError):
    """A `Replayer` has no (more) recorded response for a request; `.key` names it."""

    def __init__(self, message: str, key: str) -> None:
        self.key = key
        super().__init__(message)


class RecordingError(ReplayError):
    """A recording file is unreadable, of another format, or not the request its name says."""


class RecordedModelError(Exception):
    """Base of the exceptions a `Replayer` raises for a recorded unclassified failure.

    Each is raised as a subclass named like the original exception (a recorded
    `ValueError` replays as a `RecordedModelError` subclass named `ValueError`), so
    the error text the accounting caller records (`"ValueError: ..."`) is the same
    on replay.
    """


def request_key(model_name: str, request: ModelRequest) -> str:
    """Hex SHA-256 of `{"model": model_name, "request": request.to_json()}` in canonical JSON."""
    body = canonical_json({"model": model_name, "request": request.to_json()})
    return hashlib.sha256(body).hexdigest()


# --------------------------------------------------------------------------- scripted


class ScriptedModel:
    """Returns `responses[i]` for the i-th request, whatever it is; records every request.

    An entry may also be an exception (raised instead, to script a failure) or a
    function of the request returning the response. Asking past the end raises
    `ScriptExhaustedError` saying how many responses the script had.
    """

    def __init__(self, responses: Sequence[ScriptEntry], name: str = "scripted") -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("a ScriptedModel needs a non-empty name")
        self.name = name
        self.responses: list[ScriptEntry] = list(responses)
        self.requests: list[ModelRequest] = []

    def __repr__(self) -> str:
        return (
            f"ScriptedModel(name={self.name!r}, {len(self.requests)} of "
            f"{len(self.responses)} responses used)"
        )

    async def generate(self, request: ModelRequest) -> ModelResponse:
        index = len(self.requests)
        self.requests.append(request)
        if index >= len(self.responses):
            raise ScriptExhaustedError(
                f"the script of model {self.name!r} has {len(self.responses)} responses; "
                f"request {index + 1} has none"
            )
        entry = self.responses[index]
        if isinstance(entry, BaseException):
            raise entry
        if isinstance(entry, ModelResponse):
            return entry
        return entry(request)


# --------------------------------------------------------------------------- encoding


def response_to_json(response: ModelResponse) -> dict[str, Any]:
    """A response as stored in a recording: `to_json()` plus the raw bytes in base64."""
    out = response.to_json()
    out["raw_b64"] = base64.b64encode(bytes(response.raw)).decode("ascii")
    return out


def response_from_json(data: Any) -> ModelResponse:
    """The inverse of `response_to_json`; raises `RecordingError` on a malformed entry."""
    try:
        usage = data["usage"]
        return ModelResponse(
            text=_str(data["text"]),
            tool_uses=tuple(
                ToolUseBlock(_str(t["id"]), _str(t["name"]), t.get("input"))
                for t in data["tool_uses"]
            ),
            stop_reason=_str(data["stop_reason"]),
            usage=_usage_from_json(usage),
            raw=base64.b64decode(_str(data["raw_b64"]), validate=True),
        )
    except (KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise RecordingError(f"a recorded response is malformed: {exc!r}") from None


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _usage_from_json(data: Any) -> Usage:
    # Kept as recorded, plausible or not: the accounting caller judges usage, and
    # a replay must hand it the same numbers the provider reported.
    return Usage(
        input_tokens=data["input_tokens"],
        output_tokens=data["output_tokens"],
        cached_input_tokens=data["cached_input_tokens"],
    )


_OS_ERRORS: dict[str, type[OSError]] = {
    cls.__name__: cls
    for cls in (
        TimeoutError,
        ConnectionError,
        ConnectionResetError,
        ConnectionAbortedError,
        ConnectionRefusedError,
        BrokenPipeError,
    )
}


def _error_to_json(exc: BaseException) -> dict[str, Any]:
    # The message as the accounting caller reads it (`exception_text`): one whose `str`
    # raises, or with lone surrogates, is kept as the text the caller records for it.
    out: dict[str, Any] = {"type": type_name(exc), "message": _message(exc)}
    if isinstance(exc, TransientModelError):
        out["class"] = "transient"
        out["retry_after"] = _retry_after_to_json(exc.retry_after)
    elif isinstance(exc, ServedModelError):
        out["class"] = "served"
        out["usage"] = exc.usage.to_json() if isinstance(exc.usage, Usage) else None
    elif isinstance(exc, ModelUnavailableError):
        out["class"] = "unavailable"
    elif type(exc).__name__ in _OS_ERRORS and isinstance(exc, OSError):
        out["class"] = "os"
    else:
        out["class"] = "other"
    return out


def _message(exc: BaseException) -> str:
    try:
        message = str(exc)
    except BaseException as inner:
        return f"<its message could not be read: {type_name(inner)}>"
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _retry_after_to_json(value: Any) -> Any:
    # A timedelta is kept exactly, in whole microseconds (its own resolution); a float
    # JSON cannot hold (NaN, infinite) by its name, since the caller reads each its way.
    if isinstance(value, timedelta):
        return {"microseconds": value // timedelta(microseconds=1)}
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    return value


def _retry_after_from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"float"} and value["float"] in _NON_FINITE:
            return _NON_FINITE[value["float"]]
        micros = value["microseconds"]
        if isinstance(micros, bool) or not isinstance(micros, int):
            raise TypeError(f"retry_after microseconds must be an integer, got {micros!r}")
        try:
            return timedelta(microseconds=micros)
        except OverflowError:
            raise ValueError(f"retry_after of {micros} microseconds is past any duration") from None
    return value


_replayed_classes: dict[str, type[RecordedModelError]] = {}


def _error_from_json(data: Any) -> BaseException:
    try:
        kind = data["class"]
        name = _str(data["type"])
        message = _str(data["message"])
        if kind == "transient":
            return TransientModelError(
                message, retry_after=_retry_after_from_json(data["retry_after"])
            )
        if kind == "served":
            usage = data.get("usage")
            return ServedModelError(
                message, usage=None if usage is None else _usage_from_json(usage)
            )
        if kind == "unavailable":
            return ModelUnavailableError(message)
        if kind == "os" and name in _OS_ERRORS:
            return _OS_ERRORS[name](message) if message else _OS_ERRORS[name]()
        if kind == "other":
            cls = _replayed_classes.get(name)
            if cls is None:
                cls = type(name, (RecordedModelError,), {"__module__": __name__})
                _replayed_classes[name] = cls
            return cls(message) if message else cls()
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordingError(f"a recorded failure is malformed: {exc!r}") from None
    raise RecordingError(f"a recorded failure has an unknown class {data.get('class')!r}")


# --------------------------------------------------------------------------- files


def _path(directory: Path, key: str) -> Path:
    return directory / f"{key}.json"


def _write_atomic(directory: Path, key: str, document: dict[str, Any]) -> None:
    """Write one recording owner-only: temp file, fsync, rename, fsync the directory."""
    data = policy_json(document) + b"\n"
    final = _path(directory, key)
    temp = directory / f".{key}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o600)
    try:
        # The umask can only remove bits from 0600, but say it exactly anyway.
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(directory, best_effort=True)  # the rename itself durable


def _read_document(path: Path) -> dict[str, Any] | None:
    """A recording file's document (None when there is none), its format checked."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(f"recording {path} cannot be read: {exc}") from None
    try:
        document = from_text(text)
    except AgentrtError as exc:
        raise RecordingError(f"recording {path} is not usable JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise RecordingError(f"recording {path} is not of format {FORMAT!r}")
    return document


def _entries(path: Path, document: dict[str, Any], key: str, model_name: str) -> list[Any]:
    """The recorded entries for `key`, checked against the file's own request."""
    if document.get("model") != model_name:
        raise RecordingError(
            f"recording {path} was made for model {document.get('model')!r}, not {model_name!r}"
        )
    # The name is the hash of what the file says it answers: a file copied or
    # edited under another name would otherwise answer the wrong request.
    stored = canonical_json({"model": document.get("model"), "request": document.get("request")})
    if hashlib.sha256(stored).hexdigest() != key:
        raise RecordingError(f"recording {path} holds a request that does not hash to its name")
    entries = document.get("entries")
    if not isinstance(entries, list):
        raise RecordingError(f"recording {path} has no list of entries")
    return entries


def _document(model_name: str, request: ModelRequest, entries: list[Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "model": model_name,
        "request": request.to_json(),
        "entries": entries,
    }


# --------------------------------------------------------------------------- recorder


class Recorder:
    """Wraps a real model and records every attempt's outcome under `dir`.

    The wrapped model's `name` is this model's name (it is part of every key and
    of every recorded attempt). One instance is one recording session (see the
    module docstring for how sessions replace sequences).
    """

    def __init__(self, inner: Model, dir: str | os.PathLike[str]) -> None:
        if not isinstance(inner, Model):
            raise TypeError("Recorder wraps an agentrt.Model (a name and async generate)")
        self.inner = inner
        self.name: str = inner.name
        self.dir = Path(dir)
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._sequences: dict[str, tuple[ModelRequest, list[Any]]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Recorder({self.inner!r}, dir={str(self.dir)!r})"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        key = request_key(self.name, request)
        try:
            response = await self.inner.generate(request)
        except BaseException as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling() > 0:
                # The request was cancelled (the call timeout, or the caller's cancel):
                # whatever it raised then is the cancel's, judged as a timeout, and so it
                # replays (`TimeoutError`). Written synchronously: a cancelled task may be
                # cancelled again at any await, and the attempt must be recorded all the same.
                self._record(key, request, {"cancelled": True})
                raise
            # The provider's own failure is what the caller must classify (a `SystemExit`
            # from a library, or its own `CancelledError`, too: the caller records it as
            # any other failure, decision 0153, and so does the replay).
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self._record, key, request, {"error": _error_to_json(exc)})
            raise
        try:
            # A misbehaving adapter may return anything: recorded as a failure (its
            # replay cannot return the same wrong object), never as a response.
            if isinstance(cast(object, response), ModelResponse):
                entry: dict[str, Any] = {"response": response_to_json(response)}
            else:
                entry = {"error": _error_to_json(TypeError(f"not a ModelResponse: {response!r}"))}
            await asyncio.to_thread(self._record, key, request, entry)
        except Exception as exc:
            # The provider served (and billed) this reply: the attempt must still be
            # charged its usage, so a failure to record it (a full disk, or a reply the
            # recording's JSON refuses) is a served error.
            usage = response.usage if isinstance(cast(object, response), ModelResponse) else None
            raise ServedModelError(
                f"the reply was served but could not be recorded: {exc}", usage=usage
            ) from exc
        return response

    def _record(self, key: str, request: ModelRequest, entry: dict[str, Any]) -> None:
        with self._lock:
            sequence = self._sequences.setdefault(key, (request, []))
            # Kept only once written: an entry that cannot be must not fail the key's next.
            _write_atomic(self.dir, key, _document(self.name, request, [*sequence[1], entry]))
            sequence[1].append(entry)


# --------------------------------------------------------------------------- replayer


class Replayer:
    """Plays recordings back by request; never calls a provider (it has none).

    Each key's entries are played in order; one more request than was recorded
    raises `ReplayMissError` naming the key. `unplayed()` tells what is left.
    """

    def __init__(self, dir: str | os.PathLike[str], model_name: str) -> None:
        if not isinstance(model_name, str) or not model_name:
            raise ValueError("a Replayer needs the recorded model's name")
        self.dir = Path(dir)
        self.name = model_name
        self._entries: dict[str, list[Any]] = {}
        self._played: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"Replayer(dir={str(self.dir)!r}, model_name={self.name!r})"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        key = request_key(self.name, request)
        entries = self._load(key)
        played = self._played.get(key, 0)
        if played >= len(entries):
            if not entries:
                raise ReplayMissError(
                    f"no recording for request {key} of model {self.name!r} in {self.dir}", key
                )
            raise ReplayMissError(
                f"request {key} of model {self.name!r} was recorded {len(entries)} time(s); "
                f"attempt {played + 1} was not",
                key,
            )
        self._played[key] = played + 1
        entry = entries[played]
        if not isinstance(entry, dict):
            raise RecordingError(f"recording {key} has a malformed entry {played + 1}")
        if "response" in entry:
            return response_from_json(entry["response"])
        if entry.get("cancelled") is True:
            raise TimeoutError()
        if "error" in entry:
            raise _error_from_json(entry["error"])
        raise RecordingError(f"recording {key} has a malformed entry {played + 1}")

    def unplayed(self) -> dict[str, int]:
        """Recorded entries of this model not played yet, by key (none left: omitted)."""
        left: dict[str, int] = {}
        for path in sorted(self.dir.glob("*.json")):
            document = _read_document(path)
            # One directory may hold several models' recordings; count only ours.
            if document is None or document.get("model") != self.name:
                continue
            key = path.stem
            count = len(self._load(key)) - self._played.get(key, 0)
            if count > 0:
                left[key] = count
        return left

    def _load(self, key: str) -> list[Any]:
        entries = self._entries.get(key)
        if entries is None:
            path = _path(self.dir, key)
            document = _read_document(path)
            entries = [] if document is None else _entries(path, document, key, self.name)
            self._entries[key] = entries
        return entries
