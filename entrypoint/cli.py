"""The ``trainbox`` command: a thin layer over the modules, one subcommand per step."""

import contextlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import click

from . import __version__, config, dataset, preflight, publish, resume, status, supervise, upload
from . import train as training
from .errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")


@click.group()
@click.version_option(__version__, prog_name="trainbox")
def cli() -> None:
    """Train LibreYOLO on a rented GPU without losing money or checkpoints."""


@cli.command()
def run() -> int:
    """The container's job: check the settings, stage the dataset, train under supervisord."""
    cfg = config.load()
    log.info(
        "trainbox %s: %s run %r on %s",
        __version__,
        "demo" if cfg.is_demo else "dataset",
        cfg.run_name,
        cfg.device,
    )
    status.record(cfg.workspace, "preflight", fresh=True, run=cfg.run_name)
    try:
        code = _job(cfg)
    except TrainboxError as err:
        status.record(cfg.workspace, "failed", exit_code=int(err.code), reason=str(err))
        raise
    status.record(cfg.workspace, status.ended(code), exit_code=int(code))
    return code


def _job(cfg: config.Config) -> int:
    if status.run_state(cfg.run_dir) == "completed":
        log.info(
            "run %s already completed: nothing to train (set RUN_NAME for a new run)", cfg.run_dir
        )
        # A final upload that failed last time is retried: completed is not yet safe.
        return upload.flush(cfg) if cfg.output_repo else ExitCode.OK
    # Preflight in its own process: the CUDA context it opens must not outlive the check.
    checked = subprocess.run([sys.executable, "-m", "entrypoint", "check"], check=False)
    if checked.returncode:
        with contextlib.suppress(OSError, ValueError):
            status.record(cfg.workspace, "failed", reason=preflight.read(cfg)["error"])
        return checked.returncode
    verdict = preflight.read(cfg)
    if verdict["workers"] != cfg.workers:
        os.environ["WORKERS"] = str(verdict["workers"])  # what the train program will use
    previous = None
    if cfg.output_repo:
        previous = resume.fetch(cfg)
        if status.run_state(cfg.run_dir) == "completed":
            log.info(
                "run %s already completed on %s: nothing to train (set RUN_NAME for a new run)",
                cfg.run_name,
                cfg.output_repo,
            )
            return ExitCode.OK
        if previous is None:  # a new run: prove write access before anything slow
            upload.prepare(cfg, publish.provenance(cfg, verdict, None))
    else:
        log.warning(
            "OUTPUT_REPO is not set: the weights stay on this volume only; if the "
            "machine goes, they go with it"
        )
    status.record(cfg.workspace, "staging")
    dataset.stage(cfg)
    manifest = publish.provenance(cfg, verdict, dataset.identity(cfg))
    if previous:  # the Hub keeps the run's manifest until the resume is known to be right
        resume.check_dataset(cfg, previous, manifest)
        upload.prepare(cfg, manifest)
    publish.write_manifest(cfg.run_dir, manifest)
    status.record(cfg.workspace, "training")
    return supervise.run(upload=bool(cfg.output_repo), stop_grace=cfg.stop_grace)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def check(as_json: bool) -> None:
    """Prove this machine can train: driver, a real kernel on every GPU, shm, disk."""
    result = preflight.run(config.load())
    if as_json:
        click.echo(json.dumps(result, indent=2))


@cli.command()
def train() -> int:
    """The supervised ``train`` program (started by ``trainbox run``)."""
    return training.main(config.load())


@cli.group()
def dataset_group() -> None:
    """Datasets on the Hub."""


cli.add_command(dataset_group, "dataset")


@dataset_group.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--repo", required=True, help="Hub dataset repo ORG/NAME (created if missing).")
@click.option("--file", "name", default="", help="Name of the tar in the repo [NAME.tar].")
@click.option("--private", is_flag=True, help="Create the repo private.")
@click.option("--no-doctor", is_flag=True, help="Skip `libreyolo doctor` on FOLDER.")
def pack(folder: Path, repo: str, name: str, private: bool, no_doctor: bool) -> None:
    """Pack FOLDER (it holds data.yaml) as one tar and upload it to a Hub dataset repo.

    Do it before renting a GPU: staging then costs only the download.
    """
    name = dataset.pack(folder, repo, name=name, private=private, check=not no_doctor)
    click.echo(f"DATASET_REPO={repo}\nDATASET_FILE={name}")


@dataset_group.command("stage")
def stage_dataset() -> None:
    """Stage the configured dataset on the volume without training, and print its data.yaml."""
    click.echo(dataset.stage(config.load()))


@cli.command("upload")
@click.option(
    "--result",
    type=click.Path(path_type=Path),
    required=True,
    help="Where to write the final upload's exit code.",
)
def upload_command(result: Path) -> int:
    """The supervised uploader (started by ``trainbox run`` when OUTPUT_REPO is set)."""
    code = upload.main(config.load())
    result.write_text(f"{int(code)}\n")
    return code


@cli.command("config")
def show_config() -> None:
    """Print the settings this container would run with, after every override."""
    cfg = config.load()
    for key in config.KEYS:
        click.echo(f"{key.upper()}={getattr(cfg, key)}")


@cli.command("supervise-listener", hidden=True)
@click.argument("status_file", type=click.Path(path_type=Path))
def supervise_listener(status_file: Path) -> None:
    """supervisord event listener (internal)."""
    supervise.listen(status_file)


def main() -> None:
    """Entry point: run a subcommand, turn a TrainboxError into one line and its exit code."""
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s", stream=sys.stderr)
    for chatty in ("httpx", "httpx2", "httpcore", "httpcore2"):  # a line per HTTP request
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        code = cli.main(standalone_mode=False)
    except TrainboxError as err:
        log.error("error: %s", err)
        code = err.code
    except click.ClickException as err:
        err.show()
        code = err.exit_code
    except click.Abort:
        code = ExitCode.INTERRUPTED
    sys.exit(int(code or 0))
