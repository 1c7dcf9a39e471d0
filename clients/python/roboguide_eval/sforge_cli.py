"""``python -m roboguide_eval.sforge_cli ARGS…`` = SForge's own CLI (``python -m sforge ARGS…``) with the
``roboguide`` backend registered in SForge's factory (select it with ``SFORGE_BACKEND=roboguide`` or
``backend: roboguide`` in SForge's config). SForge's code is not changed."""

from __future__ import annotations

import runpy

from .sforge import register


def main() -> None:
    register()
    runpy.run_module("sforge", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
