"""The README and docs/ tell the truth: the generated references match the code, every link
resolves, the README stays a front door."""

import re
from pathlib import Path

from entrypoint.settings import config, reference
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_the_references_are_generated_from_the_code() -> None:
    for path, text in reference.pages().items():
        assert path.read_text() == text, (
            f"{path.relative_to(REPO)} is stale: run python -m entrypoint.settings.reference"
        )


def test_every_setting_and_exit_code_is_in_its_reference() -> None:
    settings = (REPO / "docs" / "settings.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \| `[a-z_]+` \|", settings, re.M))
    assert documented == {key.upper() for key in config.ENV_KEYS}
    codes = set(re.findall(r"^\| (\d+) \|", (REPO / "docs" / "exit-codes.md").read_text(), re.M))
    from entrypoint.errors import ExitCode

    assert codes == {str(int(code)) for code in ExitCode}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", prose, re.M)}


def links(text: str) -> list[str]:
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def test_every_link_in_the_readme_and_docs_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in links(page.read_text()):
            if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
                continue
            file, _, anchor = target.partition("#")
            found = (page.parent / file).resolve() if file else page
            if not found.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and (found.suffix != ".md" or anchor not in anchors(found.read_text())):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_link_check_catches_a_broken_one(tmp_path: Path) -> None:
    page = "# Title\n## A heading, with words\n[x](#a-heading-with-words) [y](#gone) `[z](#no)`\n"
    assert anchors(page) == {"title", "a-heading-with-words"}
    assert links(page) == ["#a-heading-with-words", "#gone"]


def test_the_readme_is_a_front_door() -> None:
    lines = README.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move depth to docs/"
    assert not [line for line in lines if len(line) > 200 and not line.startswith("|")]
    for page in sorted((REPO / "docs").glob("*.md")):  # every page is reachable from it
        assert f"docs/{page.name}" in README, page.name


def test_readme_has_the_two_setup_commands() -> None:
    block = README.split("## Set up", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["docker compose up --build", "tests/run"]
    assert "tests/run" in (REPO / ".ci" / "run").read_text()


def test_env_example_starts_with_what_a_real_run_needs() -> None:
    text = (REPO / ".env.example").read_text()
    names = re.findall(r"^# ([A-Z_]+)=", text, re.M)
    assert names[:5] == ["DATASET_REPO", "OUTPUT_REPO", "HF_TOKEN", "HF_TOKEN_FILE", "EPOCHS"]
    outside = {"HF_TOKEN", "HF_TOKEN_FILE", "TRAINBOX_CONFIG", "NOTIFY"}  # secrets, not settings
    assert set(names) <= {key.upper() for key in config.KEYS} | outside
    assert not re.findall(r"^[A-Z_]+=", text, re.M)  # all commented: nothing set by default


# The pages people write by hand (the generated references are checked above).
WRITTEN = [page for page in PAGES if page.name not in ("settings.md", "exit-codes.md")]
# Names the pages give that no file of ours holds: other programs' own variables.
OUTSIDE_NAMES = {"COMET_API_KEY"}  # comet_ml's key, read by LibreYOLO's comet logger
OUTSIDE_CODES = {137}  # Docker's for a container it killed (SIGKILL), not trainbox's
OUTSIDE_PATHS = {".ci/manywheel/build_cuda.sh"}  # PyTorch's builder script, not ours
OURS = ("entrypoint", "docker", "configs", "tests", ".ci")


def spans(page: Path) -> list[str]:
    """The page's code spans: where settings, commands and paths are written."""
    return re.findall(r"`([^`\n]+)`", page.read_text())


def our_code() -> str:
    files = [REPO / "Dockerfile", REPO / "compose.yaml", REPO / ".env.example"]
    files += [f for folder in OURS for f in (REPO / folder).rglob("*")
              if f.is_file() and f.suffix in (".py", ".sh", ".yaml", ".yml", ".json", ".toml",
                                              ".conf", ".txt", "")]  # fmt: skip
    return "\n".join(f.read_text(errors="ignore") for f in files if "__pycache__" not in f.parts)


def test_every_name_path_and_exit_code_the_pages_give_exists() -> None:
    """A setting, a variable, a path or an exit code in a hand-written page is one the code
    has: the next rename fails here instead of a user."""
    code, keys = our_code(), {key.upper() for key in config.ENV_KEYS}
    from entrypoint.errors import ExitCode

    codes = {int(c) for c in ExitCode} | OUTSIDE_CODES
    wrong = []
    for page in WRITTEN:
        for span in spans(page):
            for name in re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b[A-Z]{4,}\b", span):
                if name not in keys | OUTSIDE_NAMES and not re.search(rf"\b{name}\b", code):
                    wrong.append(f"{page.name}: {name} is no setting and nothing of ours names it")
            for path in re.findall(r"(?:^|\s)((?:entrypoint|configs|tests|docker|docs|\.ci)/"
                                   r"[\w./-]*\w)", span):  # fmt: skip
                if path not in OUTSIDE_PATHS and not (REPO / path).exists():
                    wrong.append(f"{page.name}: {path} does not exist")
        for number in re.findall(r"\bexit(?:s| code| with)? (\d+)\b", page.read_text()):
            if int(number) not in codes:
                wrong.append(f"{page.name}: exit {number} is no exit code of trainbox")
    assert not wrong, "\n".join(wrong)


def test_every_setting_a_page_gives_a_value_takes_it_and_templates_hold_theirs() -> None:
    """``KEY=VALUE`` for a setting parses as the settings do; where the line says a template
    sets it, a template in configs/providers does (or it is the default)."""
    from entrypoint.errors import TrainboxError

    keys = {key.upper() for key in config.ENV_KEYS}
    templates = "\n".join(f.read_text() for f in (REPO / "configs" / "providers").iterdir())
    wrong = []
    for page in WRITTEN:
        for line in page.read_text().splitlines():
            for key, value in re.findall(r"`([A-Z][A-Z0-9_]+)=([^\s`]+)`", line):
                if key not in keys or re.fullmatch(r"[A-Z][A-Z_]*", value):  # a placeholder
                    continue
                try:
                    loaded = config.load({key: value})
                except TrainboxError as err:
                    wrong.append(f"{page.name}: {key}={value}: {err}")
                    continue
                default = getattr(config.load({}), key.lower())
                held = re.search(rf"{key}\W+{re.escape(value)}\b", templates)
                if "template" in line and getattr(loaded, key.lower()) != default and not held:
                    wrong.append(f"{page.name}: no template sets {key}={value}")
    assert not wrong, "\n".join(wrong)
