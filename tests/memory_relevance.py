"""A relevance set for memory search: memories an agent would save, questions it would
ask, and for each question the memories that should come first.

Not a test module: tests/test_memory_relevance.py checks search against it and
tests/perf/bench_memory.py reports its figures (recall@3, MRR), so that speed is never
bought with worse answers. 40 memories are the answers; 300 more, on the same subjects
and with the same words, compete with them.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from relay.services.memory.model import Memory

PROJECT = "/home/dev/src/shop"

ANSWERS: dict[str, tuple[str, int]] = {
    # key: (content, age in days)
    "oauth": (
        "the payments API authenticates with OAuth client credentials, not API keys #auth",
        40,
    ),
    "uv": ("use uv, not pip, to install dependencies: uv sync --frozen #tooling", 12),
    "migrate": ("run database migrations with make migrate before starting the server #db", 3),
    "flaky": (
        "test_checkout_total is flaky under load; rerun it alone before blaming a change #tests",
        20,
    ),
    "redis-port": (
        "the local redis listens on port 6380, not 6379, to avoid the system redis #redis",
        60,
    ),
    "release": (
        "release with make release VERSION=x.y.z; it tags, builds and pushes the image #release",
        8,
    ),
    "staging-db": (
        "staging database is read-only between 02:00 and 03:00 UTC for backups #staging #db",
        90,
    ),
    "node": ("the frontend needs node 20; node 22 breaks the vite build #frontend", 30),
    "lint": ("ruff check --fix then ruff format; CI fails on unformatted code #lint", 5),
    "timeouts": ("webhook handler must answer within 3 seconds or Stripe retries it #webhooks", 15),
    "invoice-pdf": (
        "invoice PDFs are rendered by weasyprint in the worker, never in the web process #invoices",
        45,
    ),
    "feature-flags": (
        "feature flags live in config/flags.yaml and reload without a restart #config",
        25,
    ),
    "secrets": ("never commit .env; secrets come from vault at deploy time #security", 70),
    "cache-ttl": (
        "product cache TTL is 300 seconds; bump CACHE_VERSION to invalidate everything #cache",
        33,
    ),
    "k8s-ns": ("kubectl commands need -n shop-prod; the default namespace is empty #k8s", 18),
    "logging": (
        "structured logs only: use log.info(event, **fields), never f-strings in messages #logging",
        50,
    ),
    "timezone": ("all timestamps are stored in UTC; convert only in templates #time", 100),
    "retries": ("HTTP clients retry 3 times with exponential backoff starting at 200 ms #http", 22),
    "pr-size": ("keep pull requests under 400 lines; reviewers reject bigger ones #process", 9),
    "email-dev": (
        "in development emails go to mailhog at localhost:8025, nothing is sent #email",
        14,
    ),
    "search-index": (
        "rebuild the search index with python manage.py reindex after bulk imports #search",
        27,
    ),
    "currency": (
        "money is stored as integer cents with a currency code; never floats #payments",
        120,
    ),
    "gpu": ("the thumbnail worker needs the GPU node pool; it times out on CPU nodes #images", 11),
    "docker-cache": (
        "docker builds reuse the cache only if requirements.lock is copied before the code #docker",
        37,
    ),
    "owner-db": (
        "Priya owns the database schema; ask her before adding a migration #db #people",
        16,
    ),
    "oncall": (
        "on-call rotation is in PagerDuty; the escalation after 15 minutes is the team lead #oncall",
        55,
    ),
    "sqlite-tests": (
        "unit tests use sqlite in memory; integration tests need the postgres container #tests",
        6,
    ),
    "rate-limit": ("the public API rate limit is 100 requests per minute per key #api", 41),
    "cors": (
        "CORS allows only shop.example.com and its staging host; localhost is added in dev #security",
        29,
    ),
    "backup-restore": (
        "restore a backup with scripts/restore.sh DATE; it stops the app first #backup",
        75,
    ),
    "i18n": (
        "translations are in locale/; run make messages after changing any user-facing text #i18n",
        21,
    ),
    "metrics": (
        "latency metrics are in Grafana dashboard 'shop-api'; p99 alert at 800 ms #metrics",
        19,
    ),
    "queue": ("background jobs use the redis queue 'default'; long jobs go to 'slow' #queue", 13),
    "branch": ("branch names are type/short-description, for example fix/cart-rounding #git", 85),
    "vat": (
        "VAT is computed per line item, then rounded; rounding the total instead is wrong #payments",
        7,
    ),
    "pdf-fonts": (
        "weasyprint needs the DejaVu fonts installed or invoice PDFs show boxes #invoices",
        4,
    ),
    "auth-refresh": (
        "OAuth tokens expire after an hour; the client refreshes them 5 minutes early #auth",
        2,
    ),
    "python-version": (
        "the backend runs python 3.12; match statements are fine, 3.13 features are not #python",
        35,
    ),
    "deploy-freeze": ("no deploys on Friday after 15:00 unless it is a hotfix #release", 48),
    "image-sizes": (
        "thumbnails are 64, 256 and 1024 pixels wide; other sizes are made on demand #images",
        23,
    ),
}

QUERIES: list[tuple[str, list[str]]] = [
    ("how does the payments API authenticate", ["oauth"]),
    ("pip or uv", ["uv"]),
    ("install dependencies", ["uv"]),
    ("database migrations", ["migrate", "owner-db"]),
    ("flaky test", ["flaky"]),
    ("redis port", ["redis-port"]),
    ("how do I release", ["release"]),
    ("staging database backups", ["staging-db"]),
    ("which node version", ["node"]),
    ("ruff format", ["lint"]),
    ("webhook timeout", ["timeouts"]),
    ("invoice pdf", ["invoice-pdf", "pdf-fonts"]),
    ("feature flags", ["feature-flags"]),
    ("where do secrets come from", ["secrets"]),
    ("cache ttl", ["cache-ttl"]),
    ("kubectl namespace", ["k8s-ns"]),
    ("logging style", ["logging"]),
    ("timezone of timestamps", ["timezone"]),
    ("retry backoff", ["retries"]),
    ("pull request size", ["pr-size"]),
    ("emails in development", ["email-dev"]),
    ("reindex search", ["search-index"]),
    ("store money", ["currency"]),
    ("thumbnail worker gpu", ["gpu"]),
    ("docker build cache", ["docker-cache"]),
    ("who owns the database schema", ["owner-db"]),
    ("on-call escalation", ["oncall"]),
    ("postgres integration tests", ["sqlite-tests"]),
    ("api rate limit", ["rate-limit"]),
    ("cors localhost", ["cors"]),
    ("restore a backup", ["backup-restore"]),
    ("translations", ["i18n"]),
    ("p99 latency alert", ["metrics"]),
    ("slow background jobs", ["queue"]),
    ("branch naming", ["branch"]),
    ("vat rounding", ["vat"]),
    ("fonts missing in pdf", ["pdf-fonts"]),
    ("token expiry", ["auth-refresh"]),
    ("python version", ["python-version"]),
    ("deploy on friday", ["deploy-freeze"]),
    ("thumbnail sizes", ["image-sizes"]),
]


PARAPHRASES: list[tuple[str, list[str]]] = [
    # Questions that share no word with the memory that answers them (not even a stem:
    # tests/test_memory_relevance.py checks it with the store's own tokenizer). Search by
    # words cannot find these; search by meaning should.
    ("how does checkout prove who it is to the billing service", ["oauth"]),
    ("which package manager for python libraries", ["uv"]),
    ("how to update the schema ahead of launching the app", ["migrate"]),
    ("a check that fails randomly when the machine is busy", ["flaky"]),
    ("what number does the key value store accept connections on", ["redis-port"]),
    ("how do we publish and ship software to users", ["release"]),
    ("why can't I write to the preprod data store at night", ["staging-db"]),
    ("which javascript runtime release for the web client", ["node"]),
    ("python style checker and formatter before pushing", ["lint"]),
    ("how quickly do we need to reply to payment provider callbacks", ["timeouts"]),
    ("where are bills turned into printable documents", ["invoice-pdf", "pdf-fonts"]),
    ("where are toggles for enabling functionality stored", ["feature-flags"]),
    ("where are passwords and credentials kept", ["secrets"]),
    ("how long is catalog data kept before expiring", ["cache-ttl"]),
    ("which kubernetes environment for the production cluster", ["k8s-ns"]),
    ("how should diagnostic output be written", ["logging"]),
    ("which clock zone do dates get saved in", ["timezone"]),
    ("what happens when a web request fails temporarily", ["retries"]),
    ("how large can a code change be before someone approves it", ["pr-size"]),
    ("where do messages to customers end up on my laptop", ["email-dev"]),
    ("lookup results are stale once lots of data is loaded", ["search-index"]),
    ("how to represent prices and amounts", ["currency"]),
    ("picture resizing jobs hang on ordinary machines", ["gpu"]),
    ("why does the container rebuild slowly every time", ["docker-cache"]),
    ("who approves changes to the tables", ["owner-db"]),
    ("who gets paged when an outage is not acknowledged", ["oncall"]),
    ("what storage do automated checks run against", ["sqlite-tests"]),
    ("how many calls can a client make before being throttled", ["rate-limit"]),
    ("which origins may call us from a browser", ["cors"]),
    ("recover data from a snapshot after an accident", ["backup-restore"]),
    ("how do we support other languages", ["i18n"]),
    ("where can I see response time graphs", ["metrics"]),
    ("where do asynchronous tasks get processed", ["queue"]),
    ("what to call my version control topic", ["branch"]),
    ("how is sales tax calculated on an order", ["vat"]),
    ("printed bills display squares instead of letters", ["pdf-fonts"]),
    ("how long does a login session stay valid", ["auth-refresh"]),
    ("which interpreter release does the server side use", ["python-version"]),
    ("can I ship to production at the end of the week", ["deploy-freeze"]),
    ("what dimensions do preview pictures come in", ["image-sizes"]),
]


def _words(text: str) -> list[str]:
    return text.split()


_NOISE_WORDS = _words(
    "deploy build test lint release migration database cache queue worker server client "
    "payment invoice user account upload image thumbnail search index report export import "
    "backup restore cluster node container network proxy certificate logging metrics alert "
    "pipeline package dependency fixture timeout retry webhook api token auth redis docker "
    "python pdf staging config flags version branch rate limit secrets email vat money"
)
_NOISE_FILLER = _words(
    "the a of to in for on with before after when so and or not always then also"
)


def memories(now: datetime | None = None, *, noise: int = 300, seed: int = 5) -> list[Memory]:
    """The answers (ids `answer-KEY`) and `noise` competing memories, in one project."""
    now = now or datetime.now(UTC)
    rng = random.Random(seed)
    found = [
        _memory(f"answer-{key}", content, now - timedelta(days=age))
        for key, (content, age) in ANSWERS.items()
    ]
    for index in range(noise):
        words = [
            rng.choice(_NOISE_WORDS if rng.random() < 0.55 else _NOISE_FILLER)
            for _ in range(rng.randint(6, 16))
        ]
        age = timedelta(days=rng.uniform(0, 180))
        found.append(_memory(f"noise-{index:04d}", " ".join(words), now - age))
    return found


def _memory(memory_id: str, content: str, created: datetime) -> Memory:
    tags = [word[1:] for word in content.split() if word.startswith("#")]
    stamp = created.strftime("%Y-%m-%dT%H:%M:%S.") + f"{created.microsecond // 1000:03d}Z"
    return Memory(
        id=memory_id, content=content, tags=tags, agent="bench", project=PROJECT, created_at=stamp
    )


def evaluate(
    search: object, queries: list[tuple[str, list[str]]] | None = None
) -> tuple[float, float]:
    """(recall@3, MRR) of `search(query) -> list of memory ids, best first` over
    `queries` (default QUERIES, which share words with their answers; PARAPHRASES don't)."""
    assert callable(search)
    queries = QUERIES if queries is None else queries
    hits_at_3 = 0
    reciprocal = 0.0
    for query, keys in queries:
        wanted = {f"answer-{key}" for key in keys}
        ranked = list(search(query))
        if wanted & set(ranked[:3]):
            hits_at_3 += 1
        rank = next((place for place, found in enumerate(ranked, 1) if found in wanted), None)
        reciprocal += 1.0 / rank if rank else 0.0
    return hits_at_3 / len(queries), reciprocal / len(queries)
