"""The README tells the truth: every setting with its default, every exit code."""

import re

from entrypoint import config
from entrypoint.errors import ExitCode
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def shown(default: object) -> str:
    if isinstance(default, bool):
        return str(default).lower()
    return str(default) if default != "" else "(empty)"


def test_settings_table_matches_the_config() -> None:
    for env, default, doc in config.describe():
        row = f"| `{env}` | `{env.lower()}` | `{shown(default)}` | {doc} |"
        assert row in README, f"README's settings table lacks or misstates:\n{row}"
    documented = set(re.findall(r"^\| `([A-Z_]+)` \| `[a-z_]+` \|", README, re.M))
    assert documented == {key.upper() for key in config.ENV_KEYS}


def test_exit_code_table_lists_every_code() -> None:
    table = README.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    codes = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert codes == {int(code) for code in ExitCode}


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
