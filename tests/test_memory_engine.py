"""relay's own engine for MiniLM (relay/services/memory/minilm_engine.py and
native/minilm_engine.c), compiled by the machine's C compiler and run on the real model
file: its embeddings against those of float32 products (the graph as shipped, run by
onnxruntime) and of onnxruntime's int8 graph, with each kernel this CPU runs; what it
says of bad input; and the fallback, said, where no compiler is found."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("numpy")
pytest.importorskip("onnxruntime")

KERNELS = ("amx", "avx512vnni", "avxvnni", "avx2", "portable")
FLAGS = {
    "amx": ("amx_tile", "amx_int8", "avx512_vnni", "avx512bw", "avx512vl"),
    "avx512vnni": ("avx512_vnni", "avx512bw", "avx512vl", "avx2", "fma"),
    "avxvnni": ("avx_vnni", "avx2", "fma"),
    "avx2": ("avx2", "fma"),
    "portable": (),
}
"""What each kernel needs of the CPU, as Linux's /proc/cpuinfo names it."""


def _cpu_flags() -> set[str] | None:
    """The CPU's flags (None where /proc/cpuinfo does not say them)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    found = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return set(found.group(1).split()) if found else None


RELEVANCE_TEXTS = 40
BENCH_TEXTS = 20
"""The texts embedded: the first of the relevance set's memories and of the bench's (the
portable kernel takes about 40 ms a text; 640 took a minute of CPU a kernel)."""

_EMBED = textwrap.dedent(
    f"""
    RELEVANCE_TEXTS, BENCH_TEXTS = {RELEVANCE_TEXTS}, {BENCH_TEXTS}
    import sys
    sys.path[:0] = ["tests", "tests/perf"]
    import numpy as np
    from bench_memory import generate
    from memory_relevance import memories
    from relay.services.memory import minilm
    model = minilm.load(engine=sys.argv[1])
    texts = [memory.content for memory in memories()][:RELEVANCE_TEXTS]
    texts += [memory.content for memory in generate(BENCH_TEXTS, seed=5)]
    np.save(sys.argv[2], model.embed(texts))
    alone = np.stack([model.embed([text])[0] for text in texts[:20]])
    np.save(sys.argv[3], alone)
    print(model.engine)
    """
)


def _embed(tmp_path: Path, engine: str, env: dict[str, str], name: str) -> tuple[Any, Any, str]:
    """The embeddings of the texts (RELEVANCE_TEXTS, BENCH_TEXTS), made in a child process
    by `engine`; the first 20 again, each alone; and who made them."""
    import numpy as np

    together, alone = tmp_path / f"{name}.npy", tmp_path / f"{name}-alone.npy"
    done = subprocess.run(
        [sys.executable, "-c", _EMBED, engine, str(together), str(alone)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parent.parent,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return np.load(together), np.load(alone), done.stdout.strip()


def _float32_embeddings() -> Any:
    """The same texts through the graph as shipped (float32 products), by onnxruntime."""
    import numpy as np
    import onnxruntime  # type: ignore[import-untyped]
    from bench_memory import generate  # type: ignore[import-not-found]
    from memory_relevance import memories

    from relay.services.memory import minilm, wordpiece

    shipped = minilm._package_file(minilm._WEIGHTS_PACKAGE, minilm._WEIGHTS).read_bytes()
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(shipped, options, providers=["CPUExecutionProvider"])
    tokenizer = wordpiece.load(minilm.MAX_TOKENS)
    texts = [memory.content for memory in memories()][:RELEVANCE_TEXTS]
    texts += [memory.content for memory in generate(BENCH_TEXTS, seed=5)]
    rows = []
    for text in texts:
        ids = np.array([tokenizer.encode(text)], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }
        (states,) = session.run(["last_hidden_state"], feeds)
        mean = states[0].mean(axis=0)
        rows.append(mean / np.linalg.norm(mean))
    return np.stack(rows)


@pytest.fixture(scope="module")
def float32() -> Any:
    sys.path.insert(0, str(Path(__file__).parent / "perf"))
    try:
        return _float32_embeddings()
    finally:
        sys.path.remove(str(Path(__file__).parent / "perf"))


@pytest.fixture(scope="module")
def int8(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same texts through onnxruntime's int8 graph (relay's rewrite)."""
    vectors, _, by = _embed(
        tmp_path_factory.mktemp("onnxruntime"), "onnxruntime", dict(os.environ), "onnxruntime"
    )
    assert by == "onnxruntime"
    return vectors


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_engine_stays_within_the_bounds_of_float32_products(
    tmp_path: Path, float32: Any, int8: Any, kernel: str
) -> None:
    """With each kernel this CPU runs (by its flags; the others are skipped), the engine's
    embeddings of 60 texts stay within the cosine spec/memory.md states of those of
    float32 products (0.98 at least, 0.993 on average) and near onnxruntime's
    int8 graph's; a text's embedding is the same alone as in a batch (the activations'
    scale is one a token)."""

    env = {**os.environ, "RELAY_MINILM_KERNEL": kernel}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from relay.services.memory import minilm; minilm.load(engine='relay')",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    flags = _cpu_flags()
    if flags is not None and not set(FLAGS[kernel]) <= flags:
        pytest.skip(f"this CPU does not run the {kernel} kernel")
    if f"no kernel {kernel} on this machine" in probe.stderr and (flags is None or kernel == "amx"):
        pytest.skip(f"the {kernel} kernel is not usable here")  # AMX: the OS may refuse it
    assert probe.returncode == 0, probe.stderr
    vectors, alone, engine = _embed(tmp_path, "relay", env, kernel)
    assert engine == f"relay's engine, {kernel} kernel"
    cosines = (vectors * float32).sum(axis=1)
    assert cosines.min() > 0.98 and cosines.mean() > 0.993, (cosines.min(), cosines.mean())
    near = (vectors * int8).sum(axis=1)
    assert near.min() > 0.97 and near.mean() > 0.99, (near.min(), near.mean())
    assert (alone * vectors[:20]).sum(axis=1).min() > 0.99999


def test_the_engine_refuses_bad_input_and_a_file_it_does_not_know() -> None:
    """Token ids out of the vocabulary, a text longer than the model's positions or with
    no token: a ValueError naming the bounds, and the engine goes on embedding; a file
    that is not the model: EngineError, not a crash."""
    from relay.services.memory import minilm, minilm_engine

    shipped = minilm._package_file(minilm._WEIGHTS_PACKAGE, minilm._WEIGHTS).read_bytes()
    engine = minilm_engine.load(shipped)
    try:
        good = engine.embed([[101, 7592, 102]])
        for bad in ([[101, 30522, 102]], [[101, -1, 102]], [[101] * 513], [[]]):
            with pytest.raises(ValueError, match=r"0 to 30521, 1 to 512 a text"):
                engine.embed(bad)
        assert (engine.embed([[101, 7592, 102]]) == good).all()
    finally:
        engine.close()
    for damaged in (b"", b"\x0a\xff\xff", shipped[: len(shipped) // 2], b"not a model at all"):
        with pytest.raises(minilm_engine.EngineError, match="not the MiniLM graph"):
            minilm_engine.load(damaged)


def _relay(args: list[str], env: dict[str, str], project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay", *args, "--cwd", str(project)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def _doctor_engine(env: dict[str, str], project: Path) -> str:
    """Who runs MiniLM, as `relay doctor` says it."""
    done = _relay(["doctor", "--no-measure"], env, project)
    (line,) = [line for line in done.stdout.splitlines() if "search by meaning" in line]
    found = re.search(r"all-MiniLM-L6-v2/int8-onnx-dynamic/mean \((.*)\)$", line)
    assert found, line
    return found.group(1)


def test_relay_engine_runs_minilm_by_default_where_its_kernel_is_fast_and_doctor_says_so(
    tmp_path: Path, relay_home: Path
) -> None:
    """By default relay's engine runs MiniLM where its kernel is AMX or AVX-512 VNNI
    (minilm.FAST_KERNELS), onnxruntime installed or not; with a slower kernel (the plain
    loops, forced here with RELAY_MINILM_KERNEL), onnxruntime where it is installed, and
    relay's engine where it is not, each saying why. RELAY_MINILM_ENGINE=relay asks for
    it. Search finds by meaning, and `relay doctor` names the engine and its kernel. With
    $CC naming a missing program as well (and no build cached), the fallback is
    wordllama, and doctor gives both reasons: not silent."""
    from relay.services.memory import minilm

    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    blocked = tmp_path / "blocked" / "onnxruntime"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'onnxruntime'\", name='onnxruntime')\n"
    )
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RELAY_MINILM_ENGINE", "RELAY_MINILM_KERNEL")
    }
    asked = {**clean, "RELAY_MINILM_ENGINE": "relay"}
    without_onnxruntime = {**clean, "PYTHONPATH": str(blocked.parent)}
    saved = _relay(["memory", "save", "Auth tokens live in httpOnly cookies"], asked, project)
    assert saved.returncode == 0, saved.stderr
    best = re.fullmatch(
        r"relay's engine, (amx|avx512vnni|avxvnni|avx2|portable) kernel",
        _doctor_engine(asked, project),
    )
    assert best, "relay's engine runs when asked, with the CPU's best kernel"
    kernel = best.group(1)
    if kernel in minilm.FAST_KERNELS:
        by_default = [(clean, f"relay's engine, {kernel} kernel")]
    else:
        by_default = [
            (clean, f"onnxruntime (relay's engine: its {kernel} kernel, slower than onnxruntime)")
        ]
    missing = " (onnxruntime: onnxruntime is not installed (pip install 'agent-relay[onnx]'))"
    slow = "" if kernel in minilm.FAST_KERNELS else missing
    by_default.append((without_onnxruntime, f"relay's engine, {kernel} kernel{slow}"))
    for env, engine in by_default:
        assert _doctor_engine(env, project) == engine
        done = _relay(
            ["memory", "search", "--explain", "how do we keep users logged in"], env, project
        )
        assert done.returncode == 0, done.stderr
        assert "Auth tokens live in httpOnly cookies" in done.stdout
        assert " · model all-MiniLM-L6-v2/int8-onnx-dynamic/mean · " in done.stdout
    plain = {"RELAY_MINILM_KERNEL": "portable"}
    assert _doctor_engine({**clean, **plain}, project) == (
        "onnxruntime (relay's engine: its portable kernel, slower than onnxruntime)"
    )
    assert _doctor_engine({**without_onnxruntime, **plain}, project) == (
        f"relay's engine, portable kernel{missing}"
    )
    cannot_build = {"CC": str(tmp_path / "no-such-cc"), "RELAY_CACHE": str(tmp_path / "cache")}
    assert _doctor_engine({**clean, **cannot_build}, project).startswith(
        "onnxruntime (relay's engine: cannot build relay's MiniLM engine (cannot run"
    )

    no_compiler = {**without_onnxruntime, **cannot_build}
    done = _relay(["memory", "search", "--explain", "cookies"], no_compiler, project)
    assert done.returncode == 0, done.stderr
    assert " · model wordllama/l2_supercat/256 without stop words · " in done.stdout
    done = _relay(["doctor", "--no-measure"], no_compiler, project)
    (line,) = [line for line in done.stdout.splitlines() if "search by meaning" in line]
    assert "wordllama, the small fallback" in line, line
    assert "onnxruntime: onnxruntime is not installed" in line, line
    assert "relay's engine: cannot build relay's MiniLM engine (cannot run" in line, line
    assert "no-such-cc" in line, line
