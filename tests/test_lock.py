"""One container per volume: the lock, on the host."""

from pathlib import Path

import pytest

from entrypoint import lock
from entrypoint.errors import ExitCode, TrainboxError


def test_a_second_holder_is_refused_naming_the_first_and_a_release_frees_it(
    tmp_path: Path,
) -> None:
    with lock.volume(tmp_path, 0):
        with pytest.raises(TrainboxError) as caught, lock.volume(tmp_path, 0):
            pass
        assert caught.value.code == ExitCode.VOLUME_IN_USE
        assert f"{tmp_path} is in use by another trainbox container (host " in str(caught.value)
        with lock.volume(tmp_path, 1):  # another node's lock on a shared volume
            pass
    with lock.volume(tmp_path, 0):  # released when its holder ended
        pass


def test_a_volume_that_cannot_be_written_is_the_preflights_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(TrainboxError) as caught, lock.volume(tmp_path / "file", 0):
        pass
    assert caught.value.code == ExitCode.PREFLIGHT
    assert "is not writable" in str(caught.value)
