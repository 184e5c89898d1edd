"""SQLAlchemy 2 typed ORM tables; the word "model" is kept for language models."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine.interfaces import Dialect, ExecutionContext
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from app.natural_sort import MAX_KEY_LENGTH, natural_key

# Portable JSON: JSONB on PostgreSQL (indexable, compact), JSON text on SQLite.
JsonType = JSON().with_variant(JSONB(), "postgresql")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """``value`` as aware UTC.

    SQLite returns naive datetimes for what was stored as UTC, PostgreSQL aware ones in the
    session's time zone.
    """
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that binds and reads aware UTC on every database.

    SQLite keeps no zone (it returned naive datetimes) and PostgreSQL answers in the session's
    zone; every value read is :func:`as_utc`, so the API writes RFC 3339 times in UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Aware values as UTC: SQLite would store another zone's wall clock as UTC."""
        return None if value is None else as_utc(value)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Aware UTC, whatever the database returned."""
        return None if value is None else as_utc(value)


class Base(DeclarativeBase):
    """Declarative base with a naming convention so migrations name constraints stably."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JsonType, list[Any]: JsonType}


# Members named as their values are enum.auto() (a StrEnum's auto value is the member's name).
class BenchmarkKind(enum.StrEnum):
    """What one instance of a benchmark is."""

    pairwise = enum.auto()
    response = enum.auto()
    statement = enum.auto()
    # A question with K options; the label is an option letter.
    choice = enum.auto()
    # A question with a reference answer string; a grader decides whether an answer matches it.
    answer = enum.auto()


class Order(enum.StrEnum):
    """Presentation order of a pairwise judgment."""

    AB = "AB"
    BA = "BA"
    AB_REPEAT = "AB-repeat"


class Choice(enum.StrEnum):
    """A judge's parsed choice, as a response identity (never a slot)."""

    A = "A"
    B = "B"
    tie = "tie"
    invalid = "invalid"


class Role(enum.StrEnum):
    """What a user may do; each role may do everything the ones below it may."""

    annotator = enum.auto()
    reviewer = enum.auto()
    admin = enum.auto()

    @property
    def rank(self) -> int:
        """Position in the order annotator < reviewer < admin."""
        return list(Role).index(self)


class TokenKind(enum.StrEnum):
    """What a bearer secret stands for."""

    session = enum.auto()
    api = enum.auto()
    signin = enum.auto()


class JobStatus(enum.StrEnum):
    """Lifecycle of a job row."""

    queued = enum.auto()
    running = enum.auto()
    done = enum.auto()
    failed = enum.auto()
    cancelled = enum.auto()


def _enum_check(column: str, values: type[enum.StrEnum]) -> str:
    return f"{column} IN ({', '.join(repr(v.value) for v in values)})"


class Benchmark(Base):
    """A named set of instances of one kind, with source and licence notes."""

    __tablename__ = "benchmarks"
    __table_args__ = (CheckConstraint(_enum_check("kind", BenchmarkKind), name="kind"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(20))
    description: Mapped[str] = mapped_column(Text, default="")
    source: Mapped[str] = mapped_column(Text, default="")
    licence: Mapped[str] = mapped_column(Text, default="")
    # Bumped on every change to labels, judgments or scores: the cache key of derived numbers.
    data_version: Mapped[int] = mapped_column(Integer, default=0)
    # Bumped with data_version except by review events (votes, adjudications, withdrawals):
    # the key of what reads only the evidence and original labels (ranked disagreement lists,
    # metrics on original labels), which a vote cannot change.
    evidence_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Settings of the benchmark's kind, e.g. {"grader": "numeric"} for answer benchmarks.
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)

    instances: Mapped[list[Instance]] = relationship(back_populates="benchmark", lazy="raise")


def _natural_key_default(context: ExecutionContext) -> str:
    return natural_key(context.get_current_parameters()["external_id"])


# Byte order on PostgreSQL too (its default collation follows the locale): the key is built
# for a plain character comparison.
_SortKeyType = String(MAX_KEY_LENGTH).with_variant(
    String(MAX_KEY_LENGTH, collation="C"), "postgresql"
)


class Instance(Base):
    """One item of a benchmark; ``group_key`` is the unit of every grouped split and bootstrap.

    ``sort_key`` is :func:`app.natural_sort.natural_key` of ``external_id`` (filled in on
    insert): the table's id order.
    """

    __tablename__ = "instances"
    __table_args__ = (
        UniqueConstraint("benchmark_id", "external_id"),
        Index(None, "benchmark_id", "group_key"),
        Index(None, "benchmark_id", "sort_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(300))
    sort_key: Mapped[str] = mapped_column(_SortKeyType, default=_natural_key_default)
    group_key: Mapped[str] = mapped_column(String(300))
    payload: Mapped[dict[str, Any]] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)

    benchmark: Mapped[Benchmark] = relationship(back_populates="instances", lazy="raise")


class LabelEvent(Base):
    """Append-only label history; the current value of a label set is derived from it."""

    __tablename__ = "label_events"
    __table_args__ = (Index(None, "instance_id", "label_name", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    label_name: Mapped[str] = mapped_column(String(200))
    # Null retracts the label (e.g. a flip label whose pair became invalid).
    value: Mapped[str | None] = mapped_column(String(200))
    # Original sources: import, derived (flips) and any importer's name. Review sources: vote
    # (an annotator's; each author's latest counts, null withdraws) and adjudication (a
    # reviewer's decision; null = "no label"). Current-label readers skip the review sources
    # (app.services.evidence.labels.REVIEW_SOURCES); app.services.evidence.resolution applies them.
    source: Mapped[str] = mapped_column(String(40))
    author: Mapped[str] = mapped_column(String(200), default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    tags: Mapped[list[Any]] = mapped_column(JsonType, default=list)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Detector(Base):
    """Anything that gives instances a score or a verdict: judge, reward model, probe, baseline."""

    __tablename__ = "detectors"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(300), unique=True)
    # judge | reward_model | probe | baseline | external
    kind: Mapped[str] = mapped_column(String(40))
    description: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Judgment(Base):
    """One call of a judge on one instance in one presentation order."""

    __tablename__ = "judgments"
    __table_args__ = (
        UniqueConstraint("detector_id", "instance_id", "order"),
        CheckConstraint(_enum_check('"order"', Order), name="order"),
        CheckConstraint(_enum_check("choice", Choice), name="choice"),
        Index(None, "instance_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    detector_id: Mapped[int] = mapped_column(ForeignKey("detectors.id", ondelete="CASCADE"))
    order: Mapped[str] = mapped_column("order", String(12))
    raw_output: Mapped[str] = mapped_column(Text, default="")
    # Identity chosen (A, B, tie, invalid) after mapping the slot back through the order.
    choice: Mapped[str] = mapped_column(String(8))
    confidence: Mapped[float | None] = mapped_column(Float)
    # {"A": logit, "B": logit} of the verdict labels, when the judge exposes them.
    verdict_logits: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    # imported | generate | forced
    mode: Mapped[str] = mapped_column(String(20), default="imported")
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    activation_ref: Mapped[str | None] = mapped_column(String(500))
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Score(Base):
    """A detector's probability or score for one instance (unique per detector and instance)."""

    __tablename__ = "scores"
    __table_args__ = (UniqueConstraint("detector_id", "instance_id"), Index(None, "instance_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    detector_id: Mapped[int] = mapped_column(ForeignKey("detectors.id", ondelete="CASCADE"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    score: Mapped[float] = mapped_column(Float)
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Prediction(Base):
    """A detector's categorical answer for one instance (unique per detector and instance).

    ``answer`` is an option letter on ``choice`` benchmarks and free text on ``answer``
    benchmarks; ``probabilities`` optionally gives ``{option letter: probability}``.
    """

    __tablename__ = "predictions"
    __table_args__ = (UniqueConstraint("detector_id", "instance_id"), Index(None, "instance_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    detector_id: Mapped[int] = mapped_column(ForeignKey("detectors.id", ondelete="CASCADE"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    answer: Mapped[str] = mapped_column(Text)
    probabilities: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class ImportRecord(Base):
    """Provenance of one import: which file, its content hash, and what it added."""

    __tablename__ = "imports"
    __table_args__ = (Index(None, "benchmark_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    importer: Mapped[str] = mapped_column(String(40))
    file_name: Mapped[str] = mapped_column(String(500))
    sha256: Mapped[str] = mapped_column(String(64))
    counts: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Job(Base):
    """A unit of background work claimed by a worker through a lease."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(_enum_check("status", JobStatus), name="status"),
        Index(None, "status", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    params: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    status: Mapped[str] = mapped_column(String(12), default=JobStatus.queued.value)
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int | None] = mapped_column(Integer)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Claims that ran the job's code to a failure (or are running it now), capped by
    # max_attempts; claims whose worker vanished (lease expired) are counted apart.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    lease_losses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class LanguageModel(Base):
    """A registered language model: where its weights are and how to load and prompt it."""

    __tablename__ = "language_models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    # A local directory (safetensors + tokenizer) or a repo id resolved in the local HF cache.
    path: Mapped[str] = mapped_column(String(1000))
    # Content fingerprint of the weights (or the HF revision): activations name the model by it.
    fingerprint: Mapped[str] = mapped_column(String(128))
    dtype: Mapped[str] = mapped_column(String(20), default="auto")
    chat_template: Mapped[str | None] = mapped_column(Text)
    n_layers: Mapped[int | None] = mapped_column(Integer)
    d_model: Mapped[int | None] = mapped_column(Integer)
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class ActivationSet(Base):
    """Residual activations in a file, [n_items, n_layers, d_model], and how they were read."""

    __tablename__ = "activation_sets"
    __table_args__ = (Index(None, "benchmark_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(300), unique=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    model_id: Mapped[int | None] = mapped_column(
        ForeignKey("language_models.id", ondelete="SET NULL")
    )
    model_fingerprint: Mapped[str] = mapped_column(String(128))
    # Relative to the data directory, so a store can move with its files.
    path: Mapped[str] = mapped_column(String(1000))
    # HF hidden_states indices (0 = embeddings, k + 1 = output of block k).
    layers: Mapped[list[Any]] = mapped_column(JsonType)
    position_rule: Mapped[str] = mapped_column(String(200))
    dtype: Mapped[str] = mapped_column(String(20))
    d_model: Mapped[int] = mapped_column(Integer)
    # Row i of the arrays belongs to instance_ids[i].
    instance_ids: Mapped[list[Any]] = mapped_column(JsonType, default=list)
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class User(Base):
    """A person who signs in; ``password_hash`` is an argon2 hash (null: sign-in links only)."""

    __tablename__ = "users"
    __table_args__ = (CheckConstraint(_enum_check("role", Role), name="role"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    password_hash: Mapped[str | None] = mapped_column(Text)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class AuthToken(Base):
    """A bearer secret of a user: a browser session, an API token or a one-time sign-in link.

    Only the SHA-256 of the secret is stored, so a copy of the database signs nobody in.
    """

    __tablename__ = "auth_tokens"
    __table_args__ = (
        CheckConstraint(_enum_check("kind", TokenKind), name="kind"),
        Index(None, "user_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(12))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    # Sessions only: the synchronizer token every form and htmx POST must echo.
    csrf_token: Mapped[str | None] = mapped_column(String(64))
    label: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class LoginFailure(Base):
    """Recent password sign-in attempts of one name from one client address (the throttle).

    The name is kept as its SHA-256: any string may be typed into the form.
    """

    __tablename__ = "login_failures"
    __table_args__ = (UniqueConstraint("name_sha256", "client"), Index(None, "window_start"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name_sha256: Mapped[str] = mapped_column(String(64))
    client: Mapped[str] = mapped_column(String(64))
    attempts: Mapped[int] = mapped_column(Integer)
    window_start: Mapped[datetime] = mapped_column(UtcDateTime())


class ReviewQueue(Base):
    """A frozen list of instances to relabel, with how many annotators see each and how."""

    __tablename__ = "review_queues"
    __table_args__ = (
        UniqueConstraint("benchmark_id", "name"),
        CheckConstraint("overlap_k >= 1", name="overlap_k"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    # The label set annotators vote on.
    label_name: Mapped[str] = mapped_column(String(200))
    # "filter" (an instance-table query) or "disagreements" (a disagreement-list query).
    source: Mapped[str] = mapped_column(String(20))
    query: Mapped[str] = mapped_column(Text, default="")
    overlap_k: Mapped[int] = mapped_column(Integer, default=2)
    # Annotators see neither labels nor detector outputs.
    blind: Mapped[bool] = mapped_column(Boolean, default=True)
    # The values annotators choose from, in shortcut order (keys 1-9).
    choices: Mapped[list[Any]] = mapped_column(JsonType, default=list)
    # The defect tags votes and adjudications may carry; None (a queue made before queues
    # had their own): the benchmark kind's defaults (app.services.review.queues.default_tags).
    tags: Mapped[list[Any] | None] = mapped_column(JsonType, nullable=True)
    instructions: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # Active review: the label-error ranker that orders the unreviewed items (None: the
    # source's order), re-ranked by a job after every ``rerank_every`` newly reviewed items
    # (0: on demand only); ``ranking`` is the last re-ranking's state (reviewed count then,
    # verdicts trained on, estimated defects left).
    ranker: Mapped[str | None] = mapped_column(String(100), nullable=True)
    rerank_every: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    ranking: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)


class QueueItem(Base):
    """An instance of a queue at a fixed position (membership is frozen when the queue is made)."""

    __tablename__ = "queue_items"
    __table_args__ = (
        UniqueConstraint("queue_id", "instance_id"),
        Index(None, "queue_id", "position"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    queue_id: Mapped[int] = mapped_column(ForeignKey("review_queues.id", ondelete="CASCADE"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)


class QueueAssignment(Base):
    """A person assigned to a queue (a queue with no assignments is open to every annotator)."""

    __tablename__ = "queue_assignments"
    __table_args__ = (UniqueConstraint("queue_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    queue_id: Mapped[int] = mapped_column(ForeignKey("review_queues.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))


class QueueSkip(Base):
    """An item a person skipped in a queue: it is not offered to them again."""

    __tablename__ = "queue_skips"
    __table_args__ = (UniqueConstraint("queue_id", "instance_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    queue_id: Mapped[int] = mapped_column(ForeignKey("review_queues.id", ondelete="CASCADE"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Comment(Base):
    """One message in an instance's discussion thread (append-only)."""

    __tablename__ = "comments"
    __table_args__ = (Index(None, "instance_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    author: Mapped[str] = mapped_column(String(100))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class MetricResult(Base):
    """A metrics report as computed, kept per request and data version (issue 14).

    ``params_key`` hashes the request (label set, detectors, slice field, label mode, k,
    positive, resamples, seed) and the benchmark's creation time; with ``data_version`` it
    names exactly the numbers a request would compute. ``data_version`` is the version the
    numbers depend on (``app.services.metrics.metric_results.result_version``): the benchmark's
    evidence version for original labels, its data version for resolved ones. ``report``,
    ``plots`` and ``figures`` are JSON text (Python's float repr round-trips exactly; NaN
    stays NaN): the report's rows and intervals, the plot data drawn from, and the SVG as
    drawn.
    """

    __tablename__ = "metric_results"
    __table_args__ = (UniqueConstraint("benchmark_id", "params_key", "data_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    params_key: Mapped[str] = mapped_column(String(64))
    data_version: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    report: Mapped[str] = mapped_column(Text)
    plots: Mapped[str | None] = mapped_column(Text)
    figures: Mapped[str | None] = mapped_column(Text)
    compute_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class FacetResult(Base):
    """A benchmark's facets as computed, kept per evidence version (issue 14).

    Facets (counts, label sets and values, judges, scored detectors, slices) read evidence and
    original labels only, so ``evidence_version`` names them; ``facets`` is their JSON
    (``app.services.table.facets``). Kept so that a server starting on a big benchmark reads them
    instead of scanning it (several seconds at a million instances).
    """

    __tablename__ = "facet_results"
    __table_args__ = (UniqueConstraint("benchmark_id", "evidence_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    evidence_version: Mapped[int] = mapped_column(Integer)
    facets: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class KeptArrays(Base):
    """Named arrays derived from a benchmark's evidence, kept per evidence version (issue 21).

    What a cold read of a big benchmark spends seconds on and a page needs whole: the label
    columns of a label set, a detector's scores, the instance ids of a sorted table. ``name``
    says which (``app.sql.kept_arrays``); ``payload`` holds the arrays as one ``.npz``. They read
    evidence and original labels only, so ``evidence_version`` names them, and a write that
    bumps it leaves them unread until they are kept again.
    """

    __tablename__ = "kept_arrays"
    __table_args__ = (UniqueConstraint("benchmark_id", "name", "evidence_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(400))
    evidence_version: Mapped[int] = mapped_column(Integer)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class DisagreementResult(Base):
    """A disagreement query's whole ranked list, kept per query and data version (issue 14).

    ``params_key`` hashes the query without its limit (mode, detectors, label set, positive class,
    the mode's settled parameters) and the benchmark's creation time; with ``data_version`` it names
    exactly the list the query would rank. ``payload`` holds the list as compressed columns
    (``app.services.disagreements.disagreement_results.RankedList``); ``total`` its length and
    ``mode`` its mode, for whoever reads the table.
    """

    __tablename__ = "disagreement_results"
    __table_args__ = (UniqueConstraint("benchmark_id", "params_key", "data_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    params_key: Mapped[str] = mapped_column(String(64))
    data_version: Mapped[int] = mapped_column(Integer)
    mode: Mapped[str] = mapped_column(String(100))
    total: Mapped[int] = mapped_column(Integer)
    positive: Mapped[str | None] = mapped_column(Text)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    compute_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
