"""Helpers shared by the tests, one module per concern.

- `approvals`: a run paused on an approval (or approved), restarted, tampered with.
- `console`: the consumer's program behind the console's tests.
- `damage`: a file with a finished run, and a page of it overwritten.
- `crashes`: a child process that SIGKILLs itself mid-step, and its resumer (either backend).
- `gates`: a Gate over the test's store, and a session opened on its first step.
- `models`: scripted models behind the accounting caller, and a run that asks one.
- `providers`: local fake model servers (real HTTP on 127.0.0.1) for the adapters.
- `postgres`: a schema of its own on the test PostgreSQL server (`AGENTRT_TEST_POSTGRES_URL`).
- `rows`: every stored row, to show that a refusal changed nothing, and a change made
  behind the runtime's back, on a SQLite file or a PostgreSQL schema.
- `schema_pool`: migrated PostgreSQL schemas kept per test process, emptied between tests
  (and dropped when a test changed one); `database.pooled_schema` takes one.
- `scenarios`: the test kit's scenario factories, importable by name in children.
- `tools`: the story's recording tools: a read, a remote push, a destructive rm.

The fakes every test uses (`FakeClock`, `Ids`, `RecordingTool`) and the
fixtures stay in `tests/conftest.py`.
"""
