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
    outside = {"HF_TOKEN", "HF_TOKEN_FILE", "TRAINBOX_CONFIG"}  # read before the config
    assert set(names) <= {key.upper() for key in config.KEYS} | outside
    assert not re.findall(r"^[A-Z_]+=", text, re.M)  # all commented: nothing set by default
