from __future__ import annotations
import sqlite3
from contextlib import contextmanager, ExitStack
import psycopg, pytest
import agentrt
import agentrt._store.sqlite._connection as sqlite_connection
import agentrt._store.postgres._connection as pg_connection
from agentrt import Decision, SideEffect, StoreBusyError
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool, FakeClock, Ids

class Lock:
    def __init__(self, database, run_id=None): self.database=database; self.conn=None; self.run_id=run_id
    def take(self, run_id):
        database=self.database
        if database.startswith("postgresql"):
            base, schema = database.split("?", 1)[0], database.rsplit("schema=", 1)[1]
            conn = psycopg.connect(base)
            conn.execute(f"SET search_path TO {schema}")
            conn.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", (run_id,))
        else:
            conn = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
            conn.execute("BEGIN IMMEDIATE")
        self.conn=conn
    def release(self):
        if isinstance(self.conn, sqlite3.Connection): self.conn.execute("ROLLBACK")
        else: self.conn.rollback()
        self.conn.close(); self.conn=None

def test_driver(database, monkeypatch):
    monkeypatch.setattr(sqlite_connection, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(pg_connection, "LOCK_TIMEOUT_MS", 50)
    with agentrt.open_store(database) as store:
        tool = RecordingTool("note", SideEffect.READ_ONLY)
        lock = Lock(database)
        asked = []
        def agent(inp):
            asked.append(len(inp.steps))
            if len(asked) == 1:
                lock.take(inp.run.id)
            if tool.calls:
                return Decision.complete("done")
            return Decision.tool_call("note", {"x": 1})
        d = agentrt.Driver(store=store, agent=agent, policy=agentrt.default_policy(), tools=[tool], now=FakeClock(), new_id=Ids())
        with pytest.raises(StoreBusyError) as e:
            d.start_sync("goal")
        print(e.value)
        lock.release()
        [run] = store.list_runs()
        print(run.status, store.lease(run.id))
        print([e.type for e in store.list_events(run.id)])
        try:
            r = d.resume_sync(run.id)
        except Exception as ex:
            print("resume:", type(ex).__name__, ex); raise
        print(r.status, r.reason, asked, len(tool.calls))
        for s in store.list_steps(run.id): print(s.index, s.status, s.observation.kind if s.observation else None)
        print([e.type for e in store.list_events(run.id)])
