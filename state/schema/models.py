"""The tables, as SQLModel classes: the schema's single definition.

``events`` is the truth (append-only). ``todos``, ``runs``, ``verifications`` and
``artifacts`` are projections of it, written in the same transaction as each event.
``snapshots`` make "state at event N" a seek. ``imports`` remembers which transcript
items were imported, so importing a file twice adds nothing. ``agent_views`` keep each agent's last
written list, the base of the three-way merge of its next write. ``leases`` hold the live
expiry of leased claims, which heartbeats move. ``run_logs`` holds job output by byte
offset; logs are data, not events. ``run_series`` holds the points a job recorded
(``@series`` lines in its log, by the byte offset of the line): data too.

JSON columns are TEXT so that SQLite and PostgreSQL hold identical bytes (``db copy``).
Byte counts (a log offset, an artifact's size) are BIGINT: PostgreSQL's INTEGER stops at
2 GiB, and checkpoints are larger. (On SQLite both are the same 64-bit INTEGER.)
Timestamps are ISO-8601 UTC strings with microseconds and a ``Z``: they sort as text.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


class Migration(SQLModel, table=True):
    __tablename__ = "migrations"
    name: str = Field(primary_key=True)
    applied_at: str


class Meta(SQLModel, table=True):
    __tablename__ = "meta"
    key: str = Field(primary_key=True)
    value: str


class SessionRow(SQLModel, table=True):
    __tablename__ = "sessions"
    id: int = Field(primary_key=True)
    name: str = Field(sa_column_kwargs={"unique": True}, index=False)
    created_at: str
    pipeline: str | None = None
    parent_id: int | None = Field(default=None, foreign_key="sessions.id")
    fork_n: int | None = None


class EventRow(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (
        UniqueConstraint("session_id", "n", name="uq_events_session_n"),
        # Each index costs every write a page; these are the ones reads need: a todo's
        # history, and seeks by event number (the unique constraint). Time seeks scan one
        # session's events, which are rare and bounded by the session.
        Index("ix_events_session_todo", "session_id", "todo_id"),
        # A write's client-made key, on its first event: a retried write whose commit had
        # landed cannot be stored twice (state/retry.py). Empty on every other event.
        Index("uq_events_op", "op", unique=True),
    )
    seq: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    session_id: int = Field(foreign_key="sessions.id")
    n: int
    ts: str
    actor: str
    kind: str
    todo_id: int | None = None
    payload: str = Field(sa_column=Column(Text, nullable=False))
    ref: str | None = None
    op: str | None = None


class TodoRow(SQLModel, table=True):
    __tablename__ = "todos"
    session_id: int = Field(foreign_key="sessions.id", primary_key=True)
    num: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    content: str = Field(sa_column=Column(Text, nullable=False))
    active_form: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    status: str
    priority: str
    position: float
    stage: str | None = None
    depends_on: str = "[]"
    blocked_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    origin: str
    created_at: str
    updated_at: str
    claimed_by: str | None = None
    claimed_at: str | None = None
    lease_s: float | None = None


class LeaseRow(SQLModel, table=True):
    """The live part of a leased claim (migration ``005_claim_leases``): one row per todo
    claimed with a lease, written with the claim and removed when the claim ends.

    Not a projection of the events: heartbeats move ``heartbeat_at`` and ``expires_at``
    without an event (one UPDATE, not a log row per sign of life; docs/teams.md). Times
    are seconds since the epoch by the store's clock (state/leases.py). No index beyond
    the key: a session holds a few live leases, and every query names its session.
    """

    __tablename__ = "leases"
    session_id: int = Field(foreign_key="sessions.id", primary_key=True)
    num: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    holder: str
    lease_s: float
    heartbeat_at: float
    expires_at: float


class RunRow(SQLModel, table=True):
    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_session_todo", "session_id", "todo_id"),)
    id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    session_id: int = Field(foreign_key="sessions.id")
    todo_id: int | None = None
    stage: str | None = None
    host: str
    state: str
    attempt: int
    command: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    run_dir: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    code_hash: str | None = None
    queued_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    result: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    job: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    owner: str | None = None


class RunLogRow(SQLModel, table=True):
    __tablename__ = "run_logs"
    run_id: int = Field(foreign_key="runs.id", primary_key=True)
    start: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    data: str = Field(sa_column=Column(Text, nullable=False))


class RunSeriesRow(SQLModel, table=True):
    """One point of a series a job recorded: ``metric`` over ``axis`` at ``x``, keyed by
    the byte offset of its line in the run's log (``start``, as in ``run_logs``), so
    reading the same bytes twice adds nothing. ``x`` is JSON text (a number, or a name
    such as a checkpoint's); ``labels`` a JSON object that tells the lines of one metric
    apart (``{"position": 1}``); ``lo``/``hi`` the spread of the trials behind ``y``, when
    there were several. ``y`` is NULL for a value that is not a finite number (a NaN
    loss)."""

    __tablename__ = "run_series"
    run_id: int = Field(foreign_key="runs.id", primary_key=True)
    start: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    metric: str
    axis: str
    x: str = Field(sa_column=Column(Text, nullable=False))
    y: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    labels: str = Field(default="{}", sa_column=Column(Text, nullable=False))
    lo: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    hi: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    ts: str


class VerificationRow(SQLModel, table=True):
    __tablename__ = "verifications"
    __table_args__ = (Index("ix_verifications_session_todo", "session_id", "todo_id"),)
    id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    session_id: int = Field(foreign_key="sessions.id")
    todo_id: int | None = None
    run_id: int | None = None
    kind: str
    artifact: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    sha256: str | None = None
    passed: bool
    verdict: str = Field(sa_column=Column(Text, nullable=False))
    checks: str = Field(sa_column=Column(Text, nullable=False))
    metrics: str = Field(sa_column=Column(Text, nullable=False))
    gate: str = Field(sa_column=Column(Text, nullable=False))
    created_at: str


class ArtifactRow(SQLModel, table=True):
    __tablename__ = "artifacts"
    id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    session_id: int = Field(foreign_key="sessions.id")
    run_id: int | None = None
    todo_id: int | None = None
    path: str = Field(sa_column=Column(Text, nullable=False))
    sha256: str | None = None
    size: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    kind: str
    created_at: str


class SnapshotRow(SQLModel, table=True):
    __tablename__ = "snapshots"
    session_id: int = Field(foreign_key="sessions.id", primary_key=True)
    n: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    seq: int
    state: str = Field(sa_column=Column(Text, nullable=False))


class AgentViewRow(SQLModel, table=True):
    __tablename__ = "agent_views"
    session_id: int = Field(foreign_key="sessions.id", primary_key=True)
    actor: str = Field(primary_key=True)
    view: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: str


class ImportRow(SQLModel, table=True):
    """One imported source item (a transcript's tool-call id): imports are idempotent.

    A table of its own rather than an index on ``events.ref``: an index there would cost
    every event write a page, while only imports ask the question.
    """

    __tablename__ = "imports"
    source_key: str = Field(primary_key=True)
    session_id: int = Field(foreign_key="sessions.id")
    n: int
    imported_at: str


ALL_TABLES = [
    Migration, Meta, SessionRow, EventRow, TodoRow, RunRow, RunLogRow, VerificationRow,
    ArtifactRow, SnapshotRow, AgentViewRow, ImportRow, RunSeriesRow, LeaseRow,
]
