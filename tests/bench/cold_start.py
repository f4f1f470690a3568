#!/usr/bin/env python3
"""From rent to first step: the image's cold start, on a real registry and a cold engine.

    python tests/bench/cold_start.py [--rate 100] [--runs 3] [--keep]

In one run, for this Dockerfile's layout (torch in five layers) and the baseline (the same
Dockerfile with torch in one pip layer, its layout until now: ``baseline`` makes it from the
real one, so nothing else differs):
1. both images are built (offline, from TRAINBOX_WHEELHOUSE), then pushed to a real registry on
   127.0.0.1 (Debian's ``docker-registry``: the CNCF distribution registry);
2. a second Docker engine with an empty data root pulls each, unthrottled and through a proxy
   that caps **each connection** at --rate MB/s (what one CDN stream gives); the pull is split
   into its download and the unpacking left after the last byte;
3. that engine runs the demo until LibreYOLO's first training step, and the container's own
   clock and status split the start: container start, preflight, staging, model build;
4. on the warm engine, ``trainbox run`` against a bare ``libreyolo train`` of the same job in
   the same image, alternating, --runs times each: start to first step.
It prints sizes, layer counts, the largest layer, every time, and the ratios to the baseline.
Needs root (the second engine), about 25 GB of disk and 20 minutes on 2 cores.
"""

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from calendar import timegm
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKER = os.environ.get("DOCKER", "docker")
LAYERS, BASELINE = "trainbox:bench-layers", "trainbox:bench-one-layer"


def baseline(dockerfile: str) -> str:
    """The Dockerfile with torch installed the way it was before: one pip step, one layer, in
    the image's own stage (the torch stage is left unused, so BuildKit skips it)."""
    copies = re.search(r"(COPY --from=torch /layers/\d/ /\n)+(#[^\n]*\n)*RUN xargs [^\n]*\n",
                       dockerfile)  # fmt: skip
    assert copies, "no torch layers in the Dockerfile"
    one_step = (
        "ARG TORCHVISION_VERSION\nARG TORCH_INDEX_URL\nARG PIP_INDEX_URL\nARG PIP_EXTRA_INDEX_URL\n"
        "ARG PIP_FIND_LINKS\nARG PIP_NO_INDEX\n"
        'RUN pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} \\\n'
        '      "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" \\\n'
        " && pip freeze > /opt/trainbox/torch-constraints.txt\n"
    )
    return dockerfile[: copies.start()] + one_step + dockerfile[copies.end() :]


def docker(*args: str, host: str | None = None, check: bool = True, **kw) -> str:
    command = [DOCKER, *(["-H", host] if host else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, **kw)
    if check and done.returncode:
        raise SystemExit(f"{' '.join(command[:4])}...: {done.stderr.strip()[-2000:]}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- a throttling proxy: each connection at most RATE bytes per second -------------------
class Throttle:
    """A TCP proxy on 127.0.0.1 to ``target``; each connection's answers are capped at
    ``rate`` bytes/s (a token bucket per connection, like one CDN stream), requests are not."""

    def __init__(self, target: int, rate: float) -> None:
        self.target, self.rate, self.port = target, rate, free_port()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result(10)

    async def _serve(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def _pipe(self, reader, writer, rate: float | None) -> None:
        started, sent = time.monotonic(), 0
        try:
            while chunk := await reader.read(1 << 18):
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
                if rate and (ahead := sent / rate - (time.monotonic() - started)) > 0:
                    await asyncio.sleep(ahead)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _client(self, client_reader, client_writer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.target)
        await asyncio.gather(
            self._pipe(client_reader, writer, None), self._pipe(reader, client_writer, self.rate)
        )

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)


STREAM = 8 << 20  # bytes each connection of the proxy check fetches


def streams(rate: float, size: int = STREAM) -> tuple[float, list[float]]:
    """Two connections at once through a Throttle at ``rate``, each fetching ``size`` bytes
    from a local server: (seconds for both, seconds of each)."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        while True:
            peer, _ = server.accept()
            threading.Thread(target=lambda p=peer: (p.sendall(b"x" * size), p.close())).start()

    threading.Thread(target=answer, daemon=True).start()
    throttle = Throttle(server.getsockname()[1], rate)
    seconds: list[float] = []

    def fetch() -> None:
        started, got = time.monotonic(), 0
        with socket.create_connection(("127.0.0.1", throttle.port)) as conn:
            while chunk := conn.recv(1 << 20):
                got += len(chunk)
        if got == size:
            seconds.append(time.monotonic() - started)

    clients = [threading.Thread(target=fetch) for _ in range(2)]
    started = time.monotonic()
    for client in clients:
        client.start()
    for client in clients:
        client.join(60)
    both = time.monotonic() - started
    throttle.close()
    server.close()
    return both, seconds


# --- the registry and the cold engine ---------------------------------------------------
def registry(folder: Path, port: int | None = None) -> tuple[subprocess.Popen, int]:
    """Debian's docker-registry on 127.0.0.1 (a free port unless given), storing in ``folder``."""
    port = port or free_port()
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: "
        f"{folder / 'blobs'}}}, delete: {{enabled: true}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n"
    )
    server = subprocess.Popen(["docker-registry", "serve", str(config)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_for(lambda: socket.create_connection(("127.0.0.1", port), 1).close() or True)
    return server, port


def cold_engine(folder: Path) -> tuple[subprocess.Popen, str]:
    """A second dockerd with an empty data root (host networking only, as here)."""
    folder.mkdir(parents=True, exist_ok=True)
    host = f"unix://{folder}/d.sock"
    engine = subprocess.Popen(
        ["dockerd", "--data-root", str(folder / "data"), "--exec-root", str(folder / "x"),
         "--pidfile", str(folder / "d.pid"), "--host", host, "--bridge=none",
         "--iptables=false", "--ip6tables=false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    info = [DOCKER, "-H", host, "info"]
    wait_for(lambda: subprocess.run(info, capture_output=True, timeout=5).returncode == 0)
    return engine, host


def wait_for(ready, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("timed out waiting for a server to start")


# --- what is measured ----------------------------------------------------------------------
def layers(image: str) -> list[int]:
    """Uncompressed sizes of the image's layers (bytes), from ``docker history``."""
    out = docker("history", "--no-trunc", "--human=false", "--format", "{{.Size}}", image)
    return [int(size) for size in out.split() if int(size) > 0]


MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def manifest(host_port: int, name: str) -> dict:
    """The v2 manifest of ``name`` (REPO:TAG) on the registry at 127.0.0.1:``host_port``."""
    import urllib.request

    repo, tag = name.split(":")
    request = urllib.request.Request(
        f"http://127.0.0.1:{host_port}/v2/{repo}/manifests/{tag}", headers={"Accept": MANIFEST}
    )
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)


def compressed(host_port: int, name: str) -> tuple[int, int]:
    """(compressed bytes, largest compressed layer) from the registry's manifest."""
    sizes = [layer["size"] for layer in manifest(host_port, name)["layers"]]
    return sum(sizes), max(sizes)


def pull(host: str, ref: str) -> dict[str, float]:
    """A cold ``docker pull``: seconds to the last byte downloaded, and in all."""
    started = time.monotonic()
    process = subprocess.Popen([DOCKER, "-H", host, "pull", ref], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    downloaded = started
    for line in process.stdout:
        if "Download complete" in line or "Already exists" in line:
            downloaded = time.monotonic()
    if process.wait():
        raise SystemExit(f"pull of {ref} failed")
    total = time.monotonic() - started
    return {"download": downloaded - started, "unpack after": total - (downloaded - started),
            "pull": total}  # fmt: skip


def forget(host: str, ref: str) -> None:
    docker("image", "rm", "--force", ref, host=host, check=False)
    docker("image", "prune", "--all", "--force", host=host, check=False)


def first_step(host: str | None, image: str, workspace: Path) -> dict[str, float]:
    """``docker run`` of the demo until LibreYOLO's first step; the container's own split."""
    workspace.mkdir(parents=True)
    launched = time.time()
    name = f"bench-{os.getpid()}-{int(launched * 1000)}"
    docker("run", "-d", "--name", name, "--network", "host", "-v", f"{workspace}:/workspace",
           "-e", "DEVICE=cpu", "-e", "EPOCHS=1", image,
           host=host)  # fmt: skip
    clock = workspace / "trainbox" / "clock.json"
    try:
        wait_for(lambda: "first_step" in json.loads(clock.read_text()), 600)
    finally:
        docker("rm", "--force", name, host=host, check=False)
    moments = json.loads(clock.read_text())
    phases = dict(json.loads((workspace / "trainbox" / "status.json").read_text())["phases"])
    at = {phase: timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
          for phase, stamp in phases.items()}  # fmt: skip
    after_preflight = at.get("resuming", at["staging"])
    return {
        "container start": moments["started"] - launched,
        "preflight": after_preflight - moments["started"],
        "staging": at["training"] - at["staging"],
        "model build": moments["first_step"] - at["training"],
        "to first step": moments["first_step"] - launched,
    }


def bare_start(image: str, workspace: Path) -> float:
    """Seconds from ``docker run`` to LibreYOLO's first step, LibreYOLO's CLI alone, on the
    demo data a trainbox run wrote into ``workspace`` (its data.yaml names /workspace)."""
    out = f"bare-{time.monotonic_ns()}"
    launched = time.monotonic()
    process = subprocess.Popen(
        [DOCKER, "run", "--rm", "--name", out, "--network", "host", "-v", f"{workspace}:/workspace",
         "--entrypoint", "libreyolo", image, "train", "model=LibreYOLO9t.pt",
         "pretrained=false", "data=/workspace/data/demo/data.yaml", "device=cpu", "epochs=1",
         "batch=8", "imgsz=128", "workers=0", f"project=/workspace/{out}", "name=run"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        for line in process.stdout:
            if "Starting training for" in line:  # logged just before on_train_start
                return time.monotonic() - launched
    finally:  # the container, not only its client: a training left running skews the next run
        docker("rm", "--force", out, check=False)
        process.kill()
        process.wait()
    raise SystemExit("bare libreyolo train never started training")


def overhead(image: str, work: Path, runs: int) -> None:
    """``trainbox run`` against a bare ``libreyolo train``, alternating, on the warm engine."""
    ours, bare = [], []
    for number in range(runs):
        ours.append(first_step(None, image, work / f"warm-{number}")["to first step"])
        bare.append(bare_start(image, work / f"warm-{number}"))
    print(f"\nwarm engine, same image, start to first step ({runs} alternating runs)")
    print(f"  trainbox run         {', '.join(f'{s:.1f}' for s in ours)} s")
    print(f"  libreyolo train      {', '.join(f'{s:.1f}' for s in bare)} s")
    ratio = sorted(ours)[len(ours) // 2] / sorted(bare)[len(bare) // 2]
    print(f"  ratio (medians)      {ratio:.2f}x (goal <= 1.2x)")


def pull_goals(
    pulls: dict[str, dict[str, float]], sizes: dict[str, dict[str, float]], throttled: str
) -> None:
    """The pull's goals, and the lowest ratio this machine allows: a throttled pull cannot end
    before the unthrottled pull of the same image, whose time is the engine's unpacking."""
    baseline = pulls[f"{throttled}: pull"]["baseline"]
    ratio = pulls[f"{throttled}: pull"]["layers"] / baseline
    floor = pulls["unthrottled: pull"]["layers"] / baseline
    print(
        f"\ngoals\n  pull at {throttled}: {ratio:.2f}x the one-layer baseline (goal <= 0.6x; "
        f"this machine's floor {floor:.2f}x, its unthrottled pull)"
    )
    print(f"  largest layer {sizes['largest layer (GB)']['layers']:.2f} GB (goal <= 1.5 GB)")


def build(tag: str, dockerfile: Path, wheelhouse_port: int) -> None:
    docker("build", "--network", "host", "-t", tag, "-f", str(dockerfile),
           "--build-arg", "TORCH_INDEX_URL=", "--build-arg", "TORCH_CUDA=13.0",
           "--build-arg", f"PIP_FIND_LINKS=http://127.0.0.1:{wheelhouse_port}/",
           "--build-arg", "PIP_NO_INDEX=1", str(REPO), timeout=3600,
           env={**os.environ, "DOCKER_BUILDKIT": "1"})  # fmt: skip


def serve(folder: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                               str(port)], cwd=folder, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    wait_for(lambda: socket.create_connection(("127.0.0.1", port), 1).close() or True)
    return server, port


def show(title: str, rows: dict[str, dict[str, float]], unit: str = "s") -> None:
    print(f"\n{title}")
    for what, pair in rows.items():
        new, old = pair["layers"], pair["baseline"]
        ratio = f"{new / old:.2f}x" if old else "-"
        print(f"  {what:<28} {new:9.1f} {unit}  baseline {old:9.1f} {unit}  ratio {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100, help="MB/s per connection")
    parser.add_argument("--runs", type=int, default=3, help="start-overhead runs of each")
    parser.add_argument("--keep", action="store_true", help="keep the two bench images")
    parser.add_argument("--start-only", metavar="IMAGE", help="only the start comparison")
    args = parser.parse_args()
    if args.start_only:
        work = Path(tempfile.mkdtemp(prefix="tbstart-", dir="/tmp"))
        try:
            return overhead(args.start_only, work, args.runs)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    wheelhouse = Path(os.environ.get("TRAINBOX_WHEELHOUSE", REPO / ".cache" / "wheelhouse"))
    work = Path(tempfile.mkdtemp(prefix="tbcold-", dir="/tmp"))
    servers: list[subprocess.Popen] = []
    try:
        files, wheel_port = serve(wheelhouse)
        servers.append(files)
        variant = work / "Dockerfile.one-layer"
        variant.write_text(baseline((REPO / "Dockerfile").read_text()))
        images = {"layers": (LAYERS, REPO / "Dockerfile"), "baseline": (BASELINE, variant)}
        for tag, dockerfile in images.values():
            build(tag, dockerfile, wheel_port)
        reg, port = registry(work)
        servers.append(reg)
        sizes: dict[str, dict[str, float]] = {}
        for key, (tag, _) in images.items():
            ref = f"127.0.0.1:{port}/{tag.replace(':', '-')}:bench"
            docker("tag", tag, ref)
            docker("push", ref, timeout=3600)
            docker("image", "rm", ref)
            mine = layers(tag)
            total, largest = compressed(port, ref.split("/", 1)[1])
            for what, value in {"compressed size (GB)": total / 1e9,
                                "layers": len(mine),
                                "largest layer (GB)": max(mine) / 1e9,
                                "largest compressed (GB)": largest / 1e9}.items():  # fmt: skip
                sizes.setdefault(what, {})[key] = value
        show("image", sizes, unit=" ")
        # dockerd decompresses layers with unpigz when it finds it (moby pkg/archive), and
        # Docker's own packages recommend pigz (docker-ce's Recommends), so hosts have it.
        print(f"\ncold engine decompresses with {shutil.which('unpigz') or 'Go gzip (no unpigz)'}")
        engine, host = cold_engine(work / "cold")
        servers.append(engine)
        throttle = Throttle(port, args.rate * 1e6)
        both, whole = streams(args.rate * 1e6)
        if len(whole) != 2:
            raise SystemExit(f"proxy: {2 - len(whole)} of two streams came short: no ratio")
        # The proxy caps each connection, not their sum: two at once take one's time.
        print(f"proxy: two streams at once took {both * args.rate * 1e6 / STREAM:.2f}x one's")
        pulls: dict[str, dict[str, float]] = {}
        starts: dict[str, dict[str, float]] = {}
        for key, (tag, _) in images.items():
            name = f"{tag.replace(':', '-')}:bench"
            for label, via in (
                ("unthrottled", port),
                (f"{args.rate:.0f} MB/s each", throttle.port),
            ):
                timing = pull(host, f"127.0.0.1:{via}/{name}")
                for what, seconds in timing.items():
                    pulls.setdefault(f"{label}: {what}", {})[key] = seconds
                if via == port:
                    split = first_step(host, f"127.0.0.1:{via}/{name}", work / f"run-{key}")
                    for what, seconds in split.items():
                        starts.setdefault(what, {})[key] = seconds
                forget(host, f"127.0.0.1:{via}/{name}")
        throttle.close()
        show("cold pull (second engine, empty data root)", pulls)
        show("cold engine: docker run to LibreYOLO's first step", starts)
        pull_goals(pulls, sizes, f"{args.rate:.0f} MB/s each")
        overhead(LAYERS, work, args.runs)
    finally:
        for server in reversed(servers):
            server.send_signal(signal.SIGTERM)
            server.wait(60)
        if not args.keep:
            docker("image", "rm", "--force", LAYERS, BASELINE, check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
