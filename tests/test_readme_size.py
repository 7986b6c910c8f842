"""README.md stays a front page (what it is, the two commands, a feature table, links into the site
under docs/): at most 15 KB, and every relative link it has points at a file that exists."""
import re

from conftest import REPO


def test_readme_is_short_and_its_links_resolve() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.encode("utf-8")) <= 15_000, "README.md is over 15 KB: move the content into a page under docs/"
    links = [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in target]
    assert len(links) > 10
    missing = [target for target in links if not (REPO / target.split("#")[0]).exists()]
    assert not missing, missing
