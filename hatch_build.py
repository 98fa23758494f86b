"""The package's build hook: compiles `relay run`'s output copier (relay/session/native/
copier.c, see relay/session/copier.py) with the machine's C compiler.

An editable install builds it next to its source; a wheel carries it (and is then tagged
for this platform). Where there is no compiler or the build fails, the install goes on
with a warning and relay runs the Python copier, which does the same job more slowly.
"""

from __future__ import annotations

import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CopierBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        sys.path.insert(0, self.root)  # relay.session.copier and relay.native: stdlib only
        try:
            from relay.native import BuildError
            from relay.session.copier import build_native_copier
        finally:
            sys.path.remove(self.root)
        try:
            if version == "editable":
                build_native_copier()
                return
            self._scratch = tempfile.TemporaryDirectory(prefix="relay-copier-")
            built = build_native_copier(Path(self._scratch.name))
        except (BuildError, OSError) as exc:
            output = getattr(exc, "output", "")
            self.app.display_warning(
                f"relay: the native output copier was not built ({exc}); `relay run` will use"
                f" the Python copier, with less throughput{': ' + output if output else ''}"
            )
            return
        build_data["force_include"][str(built)] = f"relay/session/native/{built.name}"
        # A program, not an extension: any Python 3, but this platform only.
        platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{platform}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            scratch.cleanup()
