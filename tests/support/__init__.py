"""Helpers shared by the tests, one module per concern.

- `approvals`: runs paused on a real approval; a tampered approval row.
- `console`: the consumer's program behind the console's tests.
- `crashes`: a child process that SIGKILLs itself mid-step, and its resumer.
- `gates`: a Gate over the file and a scripted loop, for the Gate's tests.
- `providers`: local fake model servers (real HTTP on 127.0.0.1) for the adapters.
- `rows`: every stored row, to show that a refusal changed nothing.
- `scenarios`: the test kit's scenario factories, importable by name in children.

The fakes every test uses (`FakeClock`, `Ids`, `RecordingTool`) and the
fixtures stay in `tests/conftest.py`.
"""
