"""The benchmarks summary exists twice: BENCHMARKS.md at the repository root (links for GitHub readers,
``docs/benchmarks/<page>.md``) and the site's docs/benchmarks/index.md (links relative to the site's
page). The two tables must list the same rows, every row must link a page that exists, and every
benchmark page must be in the site's navigation."""

import re
from pathlib import Path
from typing import List

import yaml
from conftest import REPO

PAGES = REPO / "docs" / "benchmarks"


def summary_rows(path: Path) -> List[str]:
    """The table rows of a page's first table, header and rule left out."""
    rows = [line for line in path.read_text().splitlines() if line.startswith("| ")]
    assert len(rows) > 2, f"{path} has no summary table"
    return rows[1:]


def link_targets(text: str) -> List[str]:
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in target]


def test_root_and_site_summaries_list_the_same_rows() -> None:
    root = [row.replace("](docs/benchmarks/", "](") for row in summary_rows(REPO / "BENCHMARKS.md")]
    site = summary_rows(PAGES / "index.md")
    assert root == site, "BENCHMARKS.md and docs/benchmarks/index.md differ: edit both tables the same way"
    assert len(site) >= 15


def test_every_summary_link_resolves_to_a_benchmark_page() -> None:
    root_links = link_targets((REPO / "BENCHMARKS.md").read_text())
    assert root_links and all(target.startswith("docs/benchmarks/") for target in root_links), root_links
    assert "docs/benchmarks/method.md" in root_links and "docs/benchmarks/history.md" in root_links
    missing = [target for target in root_links if not (REPO / target.split("#")[0]).is_file()]
    site_links = link_targets((PAGES / "index.md").read_text())
    missing += [target for target in site_links if not (PAGES / target.split("#")[0]).is_file()]
    assert not missing, missing


def test_every_benchmark_page_is_in_the_site_navigation() -> None:
    def nav_files(node: object) -> List[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [name for value in node.values() for name in nav_files(value)]
        if isinstance(node, list):
            return [name for item in node for name in nav_files(item)]
        return []

    # mkdocs.yml holds no custom tags; the plain loader reads it.
    nav = set(nav_files(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]))
    pages = {f"benchmarks/{page.name}" for page in PAGES.glob("*.md")}
    assert pages - nav == set(), "add these pages to mkdocs.yml's Benchmarks section"
    assert len(pages) > 20
