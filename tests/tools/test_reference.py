"""docs/configuration.md is generated from the config dataclasses and kept current (a stale
reference fails here, in the quick tier and in CI)."""
import pytest

from conftest import REPO
from pbt.config import flat_keys
from pbt.mutation.network import NetworkMutationConfig
from pbt.tools import reference

DOC = REPO / "docs" / "configuration.md"


def test_the_reference_is_current() -> None:
    assert reference.main(["--check", str(DOC)]) == 0, "run: python -m pbt.tools.reference --write docs/configuration.md"


def test_every_key_is_in_the_reference_with_its_description() -> None:
    text = reference.render()
    for key in flat_keys():
        if key not in ("selection", "mutation", "network_mutation"):  # group choices, described in prose
            assert f"| `pbt.{key}` |" in text, key
    for key in NetworkMutationConfig.__dataclass_fields__:
        assert f"| `pbt.network_mutation.{key}` |" in text, key
    assert "``" not in text and ":data:" not in text  # docstring markup rendered as Markdown


def test_a_key_without_a_description_is_refused() -> None:
    import dataclasses

    @dataclasses.dataclass
    class Undocumented:
        documented: int = 1
        """Has one."""
        bare: int = 2

    with pytest.raises(ValueError, match="Undocumented.bare has no docstring"):
        reference.table("x.", Undocumented)


def test_check_reports_a_stale_file(tmp_path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(reference.render().replace("10000000", "1000"))
    assert reference.main(["--check", str(stale)]) == 1
