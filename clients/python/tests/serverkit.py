"""A real ``roboguide-eval serve`` process for the Python tests and the framework runner (temporary socket, data
dir and registry; built from this checkout: run ``npm run build`` first)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BASE_IMAGE = "roboguide/pair-driver:1"
TEST_IMAGE = "roboguide-test/py-adapters:8"
"""The synthetic image plus what harnesses expect of a Linux image: ``/bin/bash`` (busybox ``sh`` behind a script
that exports ``RG_VIA_BASH=1``, so a test can tell that bash was used), users in
``/etc/passwd`` (root, nobody, agent), ``/usr/bin/env``, ``/app``, a root-owned ``/usr/local/bin``, and a minimal busybox-style ``adduser -D NAME``
(this busybox has none; Inspect's self-check creates a user with it)."""

TEST_DOCKERFILE = f"""FROM {BASE_IMAGE}
RUN printf '#!/bin/sh\\nexport RG_VIA_BASH=1\\nexec /bin/sh "$@"\\n' > /bin/bash && chmod 0755 /bin/bash && mkdir -p /usr/bin /usr/local/bin /app /home/agent /home/nobody /etc \\
 && ln -s /bin/env /usr/bin/env \\
 && printf 'root:x:0:0:root:/root:/bin/sh\\nnobody:x:65534:65534:nobody:/home/nobody:/bin/sh\\nagent:x:1000:1000:agent:/home/agent:/bin/sh\\n' > /etc/passwd \\
 && printf 'root:x:0:\\nnobody:x:65534:\\nagent:x:1000:\\n' > /etc/group \\
 && chown 1000:1000 /home/agent && chown 65534:65534 /home/nobody && chmod 0755 /app \
 && printf '#!/bin/sh\\n[ "$1" = --help ] && {{ echo "BusyBox adduser (test image)"; exit 0; }}\\n[ "$1" = -D ] && shift\\nuid=$((2000 + $(wc -l < /etc/passwd)))\\necho "$1:x:$uid:$uid:$1:/home/$1:/bin/sh" >> /etc/passwd && mkdir -p /home/$1 && {{ chown $uid /home/$1 2>/dev/null; true; }}\\n' > /bin/adduser && chmod 0755 /bin/adduser
"""


def node_binary() -> str:
    pinned = ROOT / "node_modules" / ".bin" / "node"
    return os.environ.get("ROBOGUIDE_NODE") or (str(pinned) if pinned.exists() else "node")


def containers_labelled(label: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], check=True, capture_output=True, text=True).stdout
    return out.split()


def docker_inspect(container_id: str) -> dict:
    out = subprocess.run(["docker", "inspect", container_id], check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]


def ensure_test_image() -> str:
    """Builds :data:`TEST_IMAGE` with the engine's own builder when it is missing (no pull: FROM a local image)."""
    present = subprocess.run(["docker", "image", "inspect", TEST_IMAGE], capture_output=True).returncode == 0
    if not present:
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            data = TEST_DOCKERFILE.encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        subprocess.run(["docker", "build", "-q", "-t", TEST_IMAGE, "-"], input=context.getvalue(), check=True, capture_output=True)
    return TEST_IMAGE


class ServerFixture:
    def __init__(self, env: dict[str, str] | None = None, allow_env: list[str] | None = None, allow_builds: bool = True) -> None:
        from roboguide_eval import Client

        self.work = tempfile.mkdtemp(prefix="rg-py-")
        self.socket = os.path.join(self.work, "api.sock")
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", self.work), **(env or {})}
        if os.environ.get("DOCKER_HOST"):
            base["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
        args = [node_binary(), str(ROOT / "bin" / "run.js"), "serve", "--socket", self.socket, "--data-dir", os.path.join(self.work, "data"),
                "--registry", os.path.join(self.work, "registry.db")]
        for name in allow_env or []:
            args += ["--allow-env", name]
        if allow_builds:  # the Harbor adapter builds task images through POST /v1/images (off by default in serve)
            args.append("--allow-builds")
        self.log_path = os.path.join(self.work, "serve.log")
        self._log = open(self.log_path, "w")  # never a pipe nobody reads (a full pipe would stall the server)
        self.process = subprocess.Popen(args, env=base, stdout=subprocess.PIPE, stderr=self._log, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            raise RuntimeError(f"serve did not start: {Path(self.log_path).read_text()[-2000:]}")
        self.started = json.loads(line)
        self.client = Client(self.socket)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=120)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()
        shutil.rmtree(self.work, ignore_errors=True)
