"""The suite's own arrangement: the container tests that run beside training are real tests."""

import re

from tests.conftest import BESIDE_TRAINING, REPO


def test_each_container_test_named_to_run_beside_training_exists() -> None:
    """A renamed test would silently go back to the training worker's chain."""
    for prefix in BESIDE_TRAINING:
        path, _, name = prefix.partition("::")
        source = (REPO / path).read_text()
        tests = re.findall(r"^def (test_\w+)\(", source, re.MULTILINE)
        assert tests, f"{path}: no tests"
        assert not name or any(test.startswith(name) for test in tests), prefix
