"""The environment a real host runs in under the suite: the test process's own, less what
would change how the host behaves on one machine and not another.

CI services set `CI=true` (and GitHub `GITHUB_ACTIONS=true`); Gemini CLI then runs
headless even on a terminal ("No input provided via stdin"), and other hosts quiet their
prompts. A test that drives a host's TUI must see the TUI in CI as it does here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

PROXY_KEYS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")
CI_MARKERS = ("CI", "CONTINUOUS_INTEGRATION", "GITHUB_ACTIONS", "BUILD_NUMBER", "RUN_ID")


def clean_env(vendor_prefixes: Iterable[str]) -> dict[str, str]:
    """This process's environment without the vendor's own settings (keys starting with
    one of `vendor_prefixes`), proxies, or the marks of a CI service."""
    prefixes = tuple(prefix.upper() for prefix in vendor_prefixes)
    dropped = {*PROXY_KEYS, *CI_MARKERS}
    return {
        key: value
        for key, value in os.environ.items()
        if not key.upper().startswith(prefixes) and key.upper() not in dropped
    }
