"""The ``trainbox`` command: a thin layer over the modules, one subcommand per step."""

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

# Each command imports the modules it uses: the supervised programs start side by side with
# training, and the Hub client alone took 0.13 s of each one's start (python -X importtime).
from entrypoint import __version__, plan
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.settings import config

if TYPE_CHECKING:
    from entrypoint.state.run import Run

log = logging.getLogger("trainbox")


@click.group()
@click.version_option(__version__, prog_name="trainbox")
def cli() -> None:
    """Train LibreYOLO on a rented GPU without losing money or checkpoints."""


@cli.command()
def run() -> int:
    """The container's job: check the settings, stage the dataset, train under supervisord."""
    from entrypoint.gateways import hub, notify
    from entrypoint.runtime import ending, job

    try:
        cfg = config.load()
        hub.check_settings(os.environ)
        notify.check(os.environ)
    except TrainboxError as err:  # refused: still settled, so that no restart loop bills
        return ending.refused(err)
    return job.run(cfg)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def check(as_json: bool) -> None:
    """Prove this machine can train: driver, a real kernel on every GPU, shm, a writable volume."""
    from entrypoint.preflight import check as preflight

    result = preflight.run(_here().settings)
    if as_json:
        click.echo(json.dumps(result, indent=2))


def _here() -> "Run":
    """This program's run (``state.run``): the job's settings and preparation when ``trainbox
    run`` started it, the config for a program run by hand."""
    from entrypoint.state import run as this

    return this.here()


def _prepared() -> "Run":
    """This program's run, prepared: as the job prepared it when ``trainbox run`` started it;
    by hand, with the last preflight's workers (if one ran), the staged data.yaml and the
    fetched start weights and teacher."""
    from dataclasses import replace

    from entrypoint.dataset.stage import Wanted, data_yaml
    from entrypoint.preflight import check as preflight
    from entrypoint.state.run import Prepared
    from entrypoint.training import weights

    here = _here()
    if here.prepared:
        return here
    cfg = here.settings
    workers = preflight.workers(cfg.workspace, cfg.workers)
    start, teacher = weights.local(weights.source(cfg)), weights.local_teacher(weights.teacher(cfg))
    return replace(here, prepared=Prepared(0, workers, data_yaml(Wanted.of(cfg)), start, teacher))


@cli.command()
def train() -> int:
    """The supervised train program (started by trainbox run)."""
    from entrypoint.training import program as training

    return training.main(_prepared())


@cli.command("evaluate", hidden=True)
def evaluate_command() -> int:
    """Score the run's best.pt on its test and validation splits (started by trainbox run)."""
    from entrypoint.state import store
    from entrypoint.state.snapshot import folder
    from entrypoint.training import evaluation

    here = _prepared()
    cfg, data = here.settings, here.prepared.data_yaml if here.prepared else Path()
    dataset = store.manifest(folder(cfg.run_dir)).get("dataset") or {}
    device = "cpu" if cfg.device == "cpu" else "auto"
    return evaluation.main(evaluation.Plan(cfg.run_dir, data, cfg.imgsz, device, dataset,
                                           cfg.evaluate))  # fmt: skip


@cli.command("notify")
@click.option(
    "--test",
    "test_send",
    is_flag=True,
    required=True,
    help="Send one test message to every NOTIFY URL.",
)
def notify_command(test_send: bool) -> int:
    """Send one test message to every NOTIFY URL and say which answered."""
    from entrypoint.gateways import notify

    try:
        notify.check(os.environ)
    except TrainboxError as err:
        click.echo(f"error: {err}", err=True)
        return int(err.code)
    if not notify.urls(os.environ.get("NOTIFY", "")):
        click.echo("error: NOTIFY is not set: give it one or more Apprise URLs", err=True)
        return int(ExitCode.CONFIG)
    answered = notify.send("trainbox: a test message", "NOTIFY works: this is where trainbox "
                           "tells you how a run went.")  # fmt: skip
    for url, ok in answered.items():
        click.echo(f"{url}: {'answered' if ok else 'did not answer'}")
    return 0 if all(answered.values()) else int(ExitCode.CONFIG)


@cli.command("card")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    help="The volume whose runs the card describes (default: WORKSPACE).",
)
def card_command(workspace: Path | None) -> None:
    """Print the model card OUTPUT_REPO would get from this volume's runs, without the Hub."""
    from entrypoint.upload import card

    cfg = config.load()
    root = workspace or cfg.workspace
    click.echo(card.render(card.volume_records(root), cfg.output_repo or "ORG/NAME"), nl=False)


@cli.group()
def dataset_group() -> None:
    """Datasets on the Hub."""


cli.add_command(dataset_group, "dataset")


class Size(click.ParamType):
    """A size in bytes: ``10GB``, ``500MB``, ``1.5GiB``, ``4096``."""

    name = "size"

    def convert(self, value: object, param: object, ctx: object) -> int:
        from entrypoint.dataset.packed.shards import parse_size

        try:
            return parse_size(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)


@dataset_group.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--repo", required=True, help="Hub dataset repo ORG/NAME (created if missing).")
@click.option("--file", "name", default="",
              help="Name in the repo [NAME.tar, or NAME.shards.json when sharded].")  # fmt: skip
@click.option(
    "--shard-size",
    type=Size(),
    default="10GB",
    show_default=True,
    help="Larger datasets are packed as shards of at most this size (at most 50GB).",
)
@click.option("--private", is_flag=True, help="Create the repo private.")
@click.option("--no-doctor", is_flag=True, help="Skip `libreyolo doctor` on FOLDER.")
def pack(
    folder: Path, repo: str, name: str, shard_size: int, private: bool, no_doctor: bool
) -> None:
    """Pack FOLDER (it holds data.yaml) as one tar, or as shards and their index when it is
    larger than --shard-size, and upload it to a Hub dataset repo.

    Do it before renting a GPU: staging then costs only the download. Shards are written,
    uploaded and deleted one at a time under TMPDIR, one commit each; run it again after a cut
    and the shards already on the Hub are not uploaded again.
    """
    from entrypoint.dataset import pack as packing
    from entrypoint.runtime import processes

    doctor = None if no_doctor else processes.doctor
    name = packing.pack(folder, repo, name=name, shard_size=shard_size, private=private,
                        doctor=doctor, wait=config.load().hub_wait)  # fmt: skip
    click.echo(f"DATASET_REPO={repo}\nDATASET_FILE={name}")


@dataset_group.command("inspect")
@click.argument("repo")
@click.option("--revision", default="main", show_default=True, help="[DATASET_REVISION]")
@click.option("--format", "form", default=None, help="[DATASET_FORMAT]")
@click.option("--bbox-format", default=None, help="[BBOX_FORMAT]")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def inspect_dataset(
    repo: str, revision: str, form: str | None, bbox_format: str | None, as_json: bool
) -> None:
    """What staging REPO would find, before renting: its form, splits, image and box counts,
    classes, the box layout decided and why, the bytes to fetch and the disk the converted
    copy needs. Reads the file list and parquet footers; writes nothing."""
    from entrypoint.dataset import inspection
    from entrypoint.dataset.wanted import Wanted

    given = {"DATASET_REPO": repo, "DATASET_REVISION": revision, "DATASET_FILE": "",
             **({"DATASET_FORMAT": form} if form else {}),
             **({"BBOX_FORMAT": bbox_format} if bbox_format else {})}  # fmt: skip
    report = inspection.inspect(Wanted.of(config.load({**os.environ, **given})))
    click.echo(json.dumps(report, indent=2) if as_json else "\n".join(inspection.lines(report)))


@dataset_group.command("stage")
def stage_dataset() -> None:
    """Stage the configured dataset on the volume without training, and print its data.yaml."""
    from entrypoint.dataset import stage as dataset
    from entrypoint.runtime import processes

    cfg = config.load()
    doctor = processes.doctor if cfg.doctor else None
    wanted = dataset.Wanted.of(cfg)
    click.echo(dataset.stage(wanted, dataset.pending(wanted), doctor))


@cli.command("upload", hidden=True)
def upload_command() -> int:
    """The supervised uploader (internal; started by trainbox run when OUTPUT_REPO is set)."""
    from entrypoint.upload import uploader as upload

    run = _here()
    return upload.main(upload.Uploads.of(run.settings), run.runtime)


@cli.group("plan")
def plan_group() -> None:
    """Before renting: the disk, the cost per card, and whether to stop or destroy between runs."""


@plan_group.command("disk")
@click.option("--dataset-repo", required=True, help="Hub dataset repo ORG/NAME.")
@click.option(
    "--file",
    "name",
    default="",
    help="The tar or shard index in the repo [NAME.tar, else NAME.shards.json].",
)
@click.option("--revision", default="main", show_default=True)
@click.option("--model", default=None, help="[MODEL]")
@click.option("--epochs", type=int, default=None, help="[EPOCHS]")
@click.option("--save-period", type=int, default=None, help="[SAVE_PERIOD]")
@click.option("--checkpoint-mb", type=float, default=None,
              help="A checkpoint's size [estimated from MODEL's architecture].")  # fmt: skip
@click.option("--start-mb", type=float, default=None,
              help="Start weights' size [MODEL's file on the Hub; 0 from scratch].")  # fmt: skip
@click.option("--teacher-mb", type=float, default=None,
              help="A distillation teacher's size [distill_model's files on the Hub].")  # fmt: skip
@click.option("--exports", type=int, default=None, help="How many export formats [EXPORT].")
def plan_disk(
    dataset_repo: str,
    name: str,
    revision: str,
    model: str | None,
    epochs: int | None,
    save_period: int | None,
    checkpoint_mb: float | None,
    start_mb: float | None,
    teacher_mb: float | None,
    exports: int | None,
) -> None:
    """The GB to allocate: the dataset's size from the Hub (the tar's, or the shards' from
    their index; nothing else downloaded), twice while a new commit stages, the checkpoints the
    run keeps, the start weights, a teacher and the exports, and a 30% margin, with the
    arithmetic shown."""
    from entrypoint.dataset import stage
    from entrypoint.dataset.published import route as published
    from entrypoint.training import export, outputs

    given = {"DATASET_REPO": dataset_repo, "DATASET_FILE": name, "DATASET_REVISION": revision}
    cfg = config.load({**os.environ, **given, **({"MODEL": model} if model else {})})
    source = stage.resolve(stage.Wanted.of(cfg), wait=cfg.hub_wait)
    checkpoint = int(checkpoint_mb * 1e6) if checkpoint_mb else outputs.checkpoint_bytes(cfg.model)
    lines, _ = plan.disk(
        source.file,
        source.size,
        checkpoint,
        epochs if epochs is not None else cfg.epochs,
        save_period if save_period is not None else cfg.save_period,
        tars=len(source.shards),
        start_weights=int(start_mb * 1e6) if start_mb is not None else plan.start_bytes(cfg),
        teacher=int(teacher_mb * 1e6) if teacher_mb is not None else plan.teacher_bytes(cfg),
        exports=exports if exports is not None else len(export.formats(cfg.export)),
        zipped=isinstance(source, published.Source) and source.form == "archive",
    )
    click.echo("\n".join(lines))


@plan_group.command("stop")
@click.option("--disk-gb", type=float, required=True, help="The disk allocated, GB.")
@click.option("--storage-price", type=float, required=True, help="$ per GB-month of disk.")
@click.option("--running-price", type=float, required=True, help="$ per hour while running.")
@click.option("--rebuild-cost", type=float, required=True,
              help="$ to rent again, pull the image and stage the data.")  # fmt: skip
@click.option("--gap", type=float, default=None, help="Hours until the next run.")
@click.option("--hours-per-month", type=float, default=plan.HOURS_PER_MONTH, show_default=True)
def plan_stop(
    disk_gb: float,
    storage_price: float,
    running_price: float,
    rebuild_cost: float,
    gap: float | None,
    hours_per_month: float,
) -> None:
    """What a stopped machine costs against a running one, and the gap where destroying and
    rebuilding wins."""
    lines = plan.stop(disk_gb, storage_price, running_price, rebuild_cost, gap, hours_per_month)
    click.echo("\n".join(lines))


def _card(_ctx: object, _param: object, values: tuple[str, ...]) -> list[tuple[str, float, float]]:
    cards = []
    for value in values:
        name, _, rest = value.rpartition("=")
        price, _, seconds = rest.partition(":")
        try:
            cards.append((name.strip(), float(price.lstrip("$")), float(seconds)))
        except ValueError:
            raise click.BadParameter(f"{value!r}: expected NAME=USD_PER_HOUR:SECONDS_PER_EPOCH, "
                                     "e.g. 'RTX 4090=0.69:310'") from None  # fmt: skip
        if not name.strip() or cards[-1][1] <= 0 or cards[-1][2] <= 0:
            raise click.BadParameter(f"{value!r}: a name, a price and seconds above 0")
    return cards


@plan_group.command("cost")
@click.option("--card", "cards", multiple=True, required=True, callback=_card,
              help="NAME=USD_PER_HOUR:SECONDS_PER_EPOCH, once per card; the epoch's seconds "
                   "measured (an epoch's log line) or from a profile on that card.")  # fmt: skip
@click.option("--epochs", type=click.IntRange(1), required=True, help="Epochs of the run.")
@click.option("--overhead-min", type=click.FloatRange(0), default=0.0, show_default=True,
              help="Minutes billed without training: start, staging, final upload.")  # fmt: skip
def plan_cost(cards: list[tuple[str, float, float]], epochs: int, overhead_min: float) -> None:
    """What the run costs on each card, per epoch and in all, cheapest first."""
    click.echo("\n".join(plan.cost(cards, epochs, overhead_min)))


@cli.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.pass_context
def status(ctx: click.Context) -> int:
    """The container's state: phase, epoch, ETA, uploads, health (--json, --watch, --health)."""
    from entrypoint.state import view  # the fast path in __main__ answers before click loads

    return view.main(ctx.args)


@cli.command("config")
def show_config() -> None:
    """Print the settings this container would run with, after every override, and the
    LibreYOLO training options its run gets (LibreYOLO's defaults for MODEL's family, then
    the YAML's train: mapping, then TRAIN_ARGS)."""
    from entrypoint.settings import options

    cfg = config.load()
    for key in config.ENV_KEYS:
        value = getattr(cfg, key)
        if isinstance(value, tuple):  # IMGSZ's height and width, as the setting is written
            value = "x".join(map(str, value))
        click.echo(f"{key.upper()}={value}")
    from entrypoint.gateways import notify

    if found := notify.urls(os.environ.get("NOTIFY", "")):  # a secret: redacted
        click.echo(f"NOTIFY={' '.join(notify.shown(url) for url in found)}")
    chosen = options.effective(cfg)
    for key, value in {**options.defaults(cfg.model), **chosen}.items():
        if key not in options.OWNED:
            click.echo(f"train.{key}={value}{'' if key not in chosen else '  (set)'}")


@cli.command("launch", hidden=True)
@click.argument("procs", type=int)
def launch(procs: int) -> int:
    """The supervised train program under torchrun (internal)."""
    from entrypoint.runtime import processes

    return processes.launch(_here(), procs)


@cli.command("elastic", hidden=True, context_settings={"ignore_unknown_options": True,
                                                      "help_option_names": []})  # fmt: skip
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def elastic(argv: tuple[str, ...]) -> int:
    """torchrun, for launch (internal)."""
    from entrypoint.runtime import processes

    return processes.elastic(list(argv), _here())


@cli.command("watchdog", hidden=True)
def watchdog_command() -> int:
    """The supervised watchdog (internal): MAX_RUNTIME, STALL_TIMEOUT, status refresh."""
    from entrypoint.runtime import watchdog

    run = _here()
    return watchdog.program(run.settings, run.runtime)


@cli.command("monitor", hidden=True)
def monitor() -> None:
    """The supervised dashboard (internal): `libreyolo monitor` once the run is one to it."""
    from entrypoint.runtime import processes

    processes.dashboard(_here())


def setup_logging() -> None:
    """One handler, on stderr: every line once, prefixed with the logger's name."""
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s", stream=sys.stderr)
    for chatty in ("httpx", "httpx2", "httpcore", "httpcore2"):  # a line per HTTP request
        logging.getLogger(chatty).setLevel(logging.WARNING)


def main() -> None:
    """Entry point: run a subcommand, turn a TrainboxError into one line and its exit code."""
    setup_logging()
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
