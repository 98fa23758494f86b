"""Building the hook clients that `relay install` writes into a host's settings.

The native client (native/relay-hook.c) is compiled with the machine's C compiler, with
this install's interpreter and identity baked in; where there is no compiler, a small
Python launcher runs client.py under `python -I -S` instead.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from relay.config.sockets import identity, package_dir
from relay.native import compile_program

SOURCE = Path(__file__).resolve().parent / "native" / "relay-hook.c"
NATIVE_NAME = "relay-hook"
PYTHON_NAME = "relay-hook.py"


def c_string(text: str) -> str:
    """`text` as a C string literal."""
    escaped = []
    for char in text.encode():
        if char in b'"\\':
            escaped.append("\\" + chr(char))
        elif 0x20 <= char < 0x7F:
            escaped.append(chr(char))
        else:
            escaped.append(f"\\{char:03o}")
    return '"' + "".join(escaped) + '"'


def build_native_client(
    folder: Path, *, python: str | None = None, install: str | None = None
) -> Path:
    """Compile the native client into `folder`; raise relay.native.BuildError (no compiler, or it failed)."""
    config = (
        f"#define RELAY_PYTHON {c_string(python or sys.executable)}\n"
        f"#define RELAY_INSTALL {c_string(install or identity())}\n"
    )
    # Static where the C library allows it: no dynamic loader on each of the host's events.
    return compile_program(
        SOURCE,
        folder / NATIVE_NAME,
        flags=entry_flags(),
        static=True,
        generated={"relay-hook-config.h": config},
        cached=True,
    )


def entry_flags() -> tuple[str, ...]:
    """Where the client starts: on Linux x86-64, at its fast path, which
    answers a call the server takes before the C library starts (see relay-hook.c); no
    stack protector there, whose canary lives in thread storage not set up yet."""
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        return ("-fno-stack-protector", "-Wl,-e,relay_entry")
    return ()


def write_python_client(folder: Path) -> Path:
    """Write the Python launcher of client.py into `folder` (run it with `python -I -S`)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / PYTHON_NAME
    staged = folder / f".{PYTHON_NAME}.{os.getpid()}"
    staged.write_text(
        '"""relay\'s hook client (Python): see relay/server/client.py."""\n'
        "import os\n"
        "import resource\n"
        "import sys\n\n"
        "# Under `ulimit -f` CPython would write a .pyc cut short, and later imports fail.\n"
        "if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:\n"
        "    sys.dont_write_bytecode = True\n"
        f"sys.path.insert(0, {os.path.dirname(package_dir())!r})\n"
        "from relay.server.client import main  # noqa: E402\n\n"
        "os._exit(main(sys.argv[1:]))\n"
    )
    staged.replace(target)
    return target


def client_info(native: Path) -> dict[str, str] | None:
    """What a built native client was made for (install, python, socket), or None."""
    import json

    try:
        done = subprocess.run(
            [str(native), "--relay-client-info"], capture_output=True, timeout=10, check=False
        )
        info = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return info if isinstance(info, dict) else None
