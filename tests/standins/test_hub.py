"""The test Hub (tests/standins/hub.py) against the real huggingface_hub client: it must answer
as the real Hub does wherever trainbox depends on it, and its faults must do what they say."""

import hashlib
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from huggingface_hub import (
    CommitOperationAdd,
    HfApi,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
)
from huggingface_hub.errors import HfHubHTTPError

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.gateways import hub as gateway
from tests.standins.hub import GOOD_TOKEN, READ_TOKEN, Fault, Hub, git_blob_id, upload_mode

REPO = "org/w"
INDEX = b'{"epoch": 1, "files": {"last.pt": "abc"}}\n'
WEIGHTS = b"\x80\x02weights\x00" * 100


@pytest.fixture
def api(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> HfApi:
    """The real client, in this process, pointed at the test Hub (as HF_ENDPOINT would be)."""
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", hub.url)
    monkeypatch.setattr(
        "huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
        hub.url + "/{repo_id}/resolve/{revision}/{filename}",
    )
    hub.add(REPO, {}, kind="models")
    return HfApi(token=GOOD_TOKEN)


def commit(api: HfApi, files: dict[str, bytes], **kwargs) -> str:
    operations = [CommitOperationAdd(name, data) for name, data in files.items()]
    return api.create_commit(REPO, operations, commit_message="test", **kwargs).oid


def head(hub: Hub, name: str, timeout: float = 5) -> int:
    """A plain HEAD of a file in REPO (no client retries): its status."""
    request = urllib.request.Request(f"{hub.url}/{REPO}/resolve/main/{name}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_the_rule_for_regular_files_and_lfs() -> None:
    assert upload_mode("run/index.json", 40, b'{"epoch": 1}') == "regular"
    for name in ("a.yaml", "b.csv", "c.log", "d.txt", "e.jsonl", "README.md"):
        assert upload_mode(name, 10, b"plain text\n") == "regular", name
    for name in ("run/last.pt", "shapes.tar", "x.bin", "m.safetensors", "logs.tar.gz"):
        assert upload_mode(name, 10, b"plain text\n") == "lfs", name  # .gitattributes patterns
    assert upload_mode("saved_model/v1/notes.txt", 10, b"text") == "lfs"
    assert upload_mode("big.json", 11 * 1024 * 1024, b"[1, 2, 3") == "lfs"  # over 10 MB
    assert upload_mode("blob.dat", 10, b"abc\x00def") == "lfs"  # binary: a NUL byte
    assert upload_mode("blob.dat", 10, b"\xff\xfe\xfa") == "lfs"  # binary: not UTF-8
    assert upload_mode("notes.txt", 600, "é".encode() * 300) == "regular"  # a cut character


@pytest.mark.parametrize("transfer", ["xet", "lfs"])
def test_a_json_is_a_regular_git_file_and_a_pt_goes_to_lfs(
    hub: Hub, api: HfApi, tmp_path: Path, transfer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through Xet, as production uploads (hf_xet installed), and through LFS basic transfer,
    what huggingface_hub does with HF_HUB_DISABLE_XET (the switch this case is about)."""
    if transfer == "lfs":
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_DISABLE_XET", True)
    oid = commit(api, {"run/index.json": INDEX, "run/last.pt": WEIGHTS})
    key = f"models/{REPO}"
    assert sorted(hub.upload_modes) == [(key, "run/index.json", "regular"),
                                        (key, "run/last.pt", "lfs")]  # fmt: skip
    puts = [path for method, path in hub.requests if method == "PUT"]
    xorbs = [path for method, path in hub.requests if path.startswith("/cas/v1/xorbs/")]
    if transfer == "lfs":
        assert puts == [f"/upload/{hashlib.sha256(WEIGHTS).hexdigest()}"] and not xorbs
    else:  # the .pt's chunks in a xorb, registered by a shard; no LFS PUT
        assert xorbs and not puts and ("POST", "/cas/v2/shards") in hub.requests
        assert hub.xet_hashes.keys() == {hashlib.sha256(WEIGHTS).hexdigest()}
    assert hub.repos[key].commits[-1] == oid
    assert hub.repos[key].files == {"run/index.json": INDEX, "run/last.pt": WEIGHTS}
    assert hub.repos[key].snapshots[oid].lfs == {"run/last.pt"}

    info = {f.path: f for f in api.get_paths_info(REPO, ["run/index.json", "run/last.pt"])}
    assert info["run/index.json"].lfs is None
    assert info["run/index.json"].blob_id == git_blob_id(INDEX)
    assert info["run/index.json"].size == len(INDEX)
    assert info["run/last.pt"].lfs.sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    assert info["run/last.pt"].lfs.size == len(WEIGHTS)
    assert info["run/last.pt"].blob_id != git_blob_id(WEIGHTS)  # the pointer file's blob

    json_meta = get_hf_file_metadata(hf_hub_url(REPO, "run/index.json"))
    assert (json_meta.etag, json_meta.size, json_meta.commit_hash) == (
        git_blob_id(INDEX), len(INDEX), oid
    )  # fmt: skip
    pt_meta = get_hf_file_metadata(hf_hub_url(REPO, "run/last.pt"))
    assert (pt_meta.etag, pt_meta.size) == (hashlib.sha256(WEIGHTS).hexdigest(), len(WEIGHTS))
    response = urllib.request.urlopen(
        urllib.request.Request(hf_hub_url(REPO, "run/index.json"), method="HEAD")
    )
    assert "X-Linked-Etag" not in response.headers and "X-Linked-Size" not in response.headers

    path = hf_hub_download(REPO, "run/index.json", cache_dir=tmp_path / "cache")
    assert Path(path).read_bytes() == INDEX
    path = hf_hub_download(REPO, "run/last.pt", cache_dir=tmp_path / "cache")
    assert Path(path).read_bytes() == WEIGHTS


def test_xet_uploads_come_back_byte_for_byte_by_xet_and_by_the_redirect(
    hub: Hub, api: HfApi, tmp_path: Path
) -> None:
    """A 40 MB file and a small JSON uploaded through Xet by the real client (hf_xet), then
    downloaded byte-identical by hf_hub_download (its own Xet download: the read token, the
    reconstruction, the xorb ranges) and by the gateway's stream, which follows the resolve
    redirect to the bridge with its Range and without the token."""
    big = random.Random(24).randbytes(40 << 20)  # 40 MiB: several xorb-sized runs of chunks
    small = b'{"epoch": 7}\n'
    commit(api, {"w/big.pt": big, "w/a.json": small})
    sha = hashlib.sha256(big).hexdigest()
    assert hub.repos[f"models/{REPO}"].files["w/big.pt"] == big
    assert [m for m, p in hub.requests if p.startswith("/upload/")] == []  # no LFS PUT
    assert hub.xet_hashes.keys() == {sha}  # the JSON stays a regular git file

    path = hf_hub_download(REPO, "w/big.pt", cache_dir=tmp_path / "cache")
    assert Path(path).read_bytes() == big
    assert ("GET", f"/cas/v2/reconstructions/{hub.xet_hashes[sha]}") in hub.requests
    path = hf_hub_download(REPO, "w/a.json", cache_dir=tmp_path / "cache")
    assert Path(path).read_bytes() == small

    target = gateway.Target("OUTPUT_REPO", REPO, "w/big.pt", repo_type="model")
    remote = gateway.remote_file(target, wait=5)
    assert (remote.size, remote.sha256) == (len(big), sha)
    assert b"".join(gateway.stream(remote, 12345, wait=5, target=target)) == big[12345:]
    [served] = [s for s in hub.served if s.name == "w/big.pt"]
    assert served.start == 12345 and hub.bridge_auth == [False]  # Range kept, token not sent


@pytest.mark.parametrize(("token", "status"), [(READ_TOKEN, 403), ("hf_wrong", 401)])
def test_a_refused_xet_token_is_the_tokens_line(
    hub: Hub, api: HfApi, monkeypatch: pytest.MonkeyPatch, token: str, status: int
) -> None:
    """hf_xet reports a refused write token as a bare ConnectionError; the gateway asks the
    token route itself and says which token and what to do, exit 7."""
    monkeypatch.setenv("HF_TOKEN", token)
    target = gateway.Target("OUTPUT_REPO", REPO, repo_type="model")
    with pytest.raises(TrainboxError) as caught:
        gateway.put(target, {"run/last.pt": WEIGHTS}, "epoch 1", wait=5)
    assert caught.value.code == ExitCode.UPLOAD
    assert f"the Hub refused HF_TOKEN for OUTPUT_REPO={REPO} ({status})" in str(caught.value)
    assert not [p for _, p in hub.requests if p.startswith("/cas/")]  # refused before the CAS


def test_a_mirror_without_xet_uploads_through_lfs(
    hub: Hub, api: HfApi, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Hub-compatible server without Xet (its token route is 404): said once, then LFS."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", False)
    hub.xet = False
    target, transfers = gateway.Target("OUTPUT_REPO", REPO, repo_type="model"), gateway.Transfers()
    gateway.put(target, {"run/last.pt": WEIGHTS}, "epoch 1", wait=5, transfers=transfers)
    gateway.put(target, {"run/best.pt": WEIGHTS[::-1]}, "epoch 2", wait=5, transfers=transfers)
    assert hub.repos[f"models/{REPO}"].files["run/best.pt"] == WEIGHTS[::-1]
    assert len([p for m, p in hub.requests if m == "PUT"]) == 2  # both through LFS
    said = [r.message for r in caplog.records if "no Xet storage" in r.message]
    assert len(said) == 1 and "uploads go through LFS" in said[0]


def test_a_commit_sha_serves_that_commits_bytes(hub: Hub, api: HfApi, tmp_path: Path) -> None:
    first = commit(api, {"run/index.json": b'{"epoch": 1}\n'})
    second = commit(api, {"run/index.json": b'{"epoch": 2}\n', "run/last.pt": WEIGHTS})
    assert hub.repos[f"models/{REPO}"].files["run/index.json"] == b'{"epoch": 2}\n'

    older = hf_hub_download(REPO, "run/index.json", revision=first, cache_dir=tmp_path / "c")
    assert Path(older).read_bytes() == b'{"epoch": 1}\n'
    newest = hf_hub_download(REPO, "run/index.json", cache_dir=tmp_path / "c")
    assert Path(newest).read_bytes() == b'{"epoch": 2}\n'
    assert get_hf_file_metadata(hf_hub_url(REPO, "run/index.json", revision=first)).commit_hash == (
        first
    )
    assert get_hf_file_metadata(hf_hub_url(REPO, "run/index.json")).commit_hash == second
    assert [f.path for f in api.get_paths_info(REPO, ["run/last.pt"], revision=first)] == []
    assert [f.path for f in api.get_paths_info(REPO, ["run/last.pt"], revision=second)] == [
        "run/last.pt"
    ]


def test_a_stale_parent_commit_is_refused_with_412(hub: Hub, api: HfApi) -> None:
    base = hub.repos[f"models/{REPO}"].commits[-1]
    moved = commit(api, {"run/index.json": b"{}"}, parent_commit=base)  # the head: accepted
    with pytest.raises(HfHubHTTPError) as caught:
        commit(api, {"run/index.json": b'{"late": true}'}, parent_commit=base)
    assert caught.value.response.status_code == 412
    assert "The branch was updated since you opened this page" in str(caught.value)
    assert hub.repos[f"models/{REPO}"].commits[-1] == moved
    assert hub.repos[f"models/{REPO}"].files["run/index.json"] == b"{}"


def test_a_fault_for_some_seconds_ends_after_them(hub: Hub) -> None:
    hub.add(REPO, {"a.json": b"{}"}, kind="models")
    fault = Fault("a.json", status=503, seconds=0.6, methods=("HEAD",))
    hub.faults.append(fault)
    assert [head(hub, "a.json") for _ in range(3)] == [503, 503, 503]
    assert fault.hits == 3 and fault.times == 1  # times is not what limits it
    time.sleep(max(0.0, fault.until - time.monotonic()) + 0.05)
    assert head(hub, "a.json") == 200
    assert fault.hits == 3


def test_a_hang_delays_the_answer(hub: Hub) -> None:
    hub.add(REPO, {"a.json": b"{}"}, kind="models")
    hub.faults += [
        Fault("a.json", hang=30, methods=("HEAD",)),
        Fault("a.json", hang=30, status=503, methods=("HEAD",)),
        Fault("a.json", hang=0.2, status=503, methods=("HEAD",)),
    ]
    with pytest.raises(TimeoutError):  # silent for longer than the client waits
        head(hub, "a.json", timeout=0.5)
    with pytest.raises(TimeoutError):  # the same before its refusal
        head(hub, "a.json", timeout=0.5)
    assert head(hub, "a.json", timeout=30) == 503  # a short hang, then the answer
    assert head(hub, "a.json") == 200  # each fault was for one request
    assert [fault.hits for fault in hub.faults] == [1, 1, 1]


def test_refuse_closes_the_port_then_listens_on_it_again(hub: Hub) -> None:
    hub.add(REPO, {"a.json": b"{}"}, kind="models")
    for _ in range(3):  # and again, on the same port
        listening = hub.refuse(0.3)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", hub.port), timeout=1).close()
        assert listening.wait(5)
        assert hub.url == f"http://127.0.0.1:{hub.port}"
        assert head(hub, "a.json") == 200


def test_served_records_a_get_when_it_starts(hub: Hub) -> None:
    hub.add(REPO, {"big.bin": bytes(range(256)) * 100}, kind="models")
    hub.faults.append(Fault("big.bin", stall_after=1000, methods=("GET",)))
    with urllib.request.urlopen(f"{hub.url}/{REPO}/resolve/main/big.bin", timeout=5) as response:
        assert len(response.read(1000)) == 1000
        deadline = time.monotonic() + 5
        while hub.served[0].sent < 1000 and time.monotonic() < deadline:
            time.sleep(0.01)
        (name, start, sent), entry = hub.served[0], hub.served[0]
        assert (name, start, sent, entry.done) == ("big.bin", 0, 1000, False)


def test_requests_from_many_threads_are_all_logged(hub: Hub) -> None:
    hub.add(REPO, {"a.json": b"{}"}, kind="models")
    threads = [threading.Thread(target=head, args=(hub, "a.json")) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len([p for m, p in hub.requests if m == "HEAD"]) == 16


def test_bytes_a_test_puts_in_files_are_what_the_hub_then_holds(hub: Hub, api: HfApi) -> None:
    commit(api, {"run/last.pt": WEIGHTS, "run/index.json": INDEX})
    assert len(api.get_paths_info(REPO, ["run/last.pt", "run/index.json"])) == 2  # hashes cached
    files = hub.repos[f"models/{REPO}"].files
    files["run/last.pt"], files["run/index.json"] = b"other bytes", b"{}"
    found = {f.path: f for f in api.get_paths_info(REPO, ["run/last.pt", "run/index.json"])}
    assert found["run/last.pt"].lfs.sha256 == hashlib.sha256(b"other bytes").hexdigest()
    assert found["run/index.json"].blob_id == git_blob_id(b"{}")


def test_a_hub_client_retry_is_logged_once() -> None:
    """huggingface_hub's own handler and trainbox's both printed its warnings: twice."""
    import subprocess
    import sys

    emit = (
        "from entrypoint import cli; cli.setup_logging(); import logging; "
        "logging.getLogger('huggingface_hub.utils._http').warning('Retrying in 1s [Retry 1/5].')"
    )
    done = subprocess.run([sys.executable, "-c", emit], capture_output=True, text=True, check=True)
    assert done.stderr.count("Retrying in 1s") == 1, done.stderr
    assert done.stderr.startswith("[huggingface_hub.utils._http] Retrying in 1s")
