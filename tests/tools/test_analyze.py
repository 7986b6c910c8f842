"""pbt.analyze on a workspace made by a real short population (tests/pbt_population.py): the plots
exist and are not blank, the report's lineage is the lineage files' events, the best member's
checkpoint and schedule are exported and verified; plus the schedule reconstruction on synthetic
lineages (replace chains, frame offsets, missing ancestors)."""
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from conftest import REPO, worker_env
from pbt_population import CRIPPLED, N, population

from pbt.rl_games.a2c import CONTINUOUS_SETTERS as SETTERS
from pbt.storage import LineageEntry
from pbt.tools.analyze import IMAGES
from pbt.tools.families import families, family_lines
from pbt.tools.replay import load_schedule, plan
from pbt.tools.schedule import reconstruct_schedule
from pbt.tools.export import scored_records
from pbt.tools.snapshot import open_reader, read_snapshot


@pytest.fixture(scope="session")
def pop(tmp_path_factory):
    return population(tmp_path_factory)


@pytest.fixture(scope="module")
def analysis(pop, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("analysis")
    proc = subprocess.run([sys.executable, "-m", "pbt.analyze", str(pop.workspace), "--out", str(out)],
                          cwd=str(REPO), env=worker_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "report:" in proc.stdout
    return out


def distinct_colours(path: Path) -> int:
    from PIL import Image

    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 22)
    return len(colours)


@pytest.mark.training
def test_plots_exist_and_are_not_blank(analysis):
    from PIL import Image

    for name in IMAGES:
        path = analysis / name
        assert path.exists(), name
        assert 10_000 < path.stat().st_size < 400_000, (name, path.stat().st_size)
        with Image.open(path) as image:
            width, height = image.size
            colours = image.convert("RGB").getcolors(maxcolors=1 << 22)
        non_white = sum(count for count, colour in colours if colour != (255, 255, 255))
        assert width >= 600 and height >= 250
        assert non_white > 0.02 * width * height, f"{name} is nearly blank"
        assert distinct_colours(path) >= N + 4, f"{name} has too few colours for {N} members"


def _report_events(text: str) -> List[Dict[str, str]]:
    section = text.split("## Lineage events", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split(" | ")]
    events = []
    for row in rows[1:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        events.append(dict(zip(header, cells)))
    return events


def _fmt(value) -> str:
    if value is None:
        return "-"
    return str(value)


@pytest.mark.training
def test_report_lineage_matches_lineage_files(pop, analysis):
    expected = []
    for idx in range(N):
        for entry in pop.lineage(idx):
            if entry["action"] == "keep":
                continue
            action = "startup" if entry["mode"] == "startup" else entry["action"]
            expected.append((str(entry["policy_idx"]), str(entry["iteration"]), str(entry["frame"]), action,
                             _fmt(entry["donor"]), _fmt(entry["donor_iteration"])))
    report = (analysis / "report.md").read_text()
    got = [(e["policy"], e["iteration"], e["frame"], e["action"], e["donor"], e["donor iteration"])
           for e in _report_events(report)]
    assert sorted(got) == sorted(expected)
    assert any(e[3] == "replace" for e in got)
    for image in IMAGES:
        assert f"]({image})" in report
    page = (analysis / "report.html").read_text()
    assert page.count("<tr>") == len(got) + N + 2  # two header rows
    for image in IMAGES:
        assert f"src='{image}'" in page
    # the families: a replaced member is in its donor's family, and the report lists them
    found = families({i: [LineageEntry.from_dict(e) for e in pop.lineage(i)] for i in range(N)})
    assert any(len(members) > 1 for members in found.members().values())
    assert "## Families" in report and "<h2>Families</h2>" in page
    for line in family_lines(found):
        assert line in report


@pytest.mark.training
def test_best_member_checkpoint_and_schedule(pop, analysis):
    snapshot = read_snapshot(pop.workspace)
    # (each member's newest scored record: a member replaced in its last interval has none in its newest)
    record = scored_records(snapshot, open_reader(pop.workspace))[0]
    best_dir = analysis / "best"
    data = (best_dir / "checkpoint.pth").read_bytes()
    assert hashlib.sha256(data).hexdigest() == record.checksum
    from pbt.storage.checkpoints import load_state_file

    assert "model" in load_state_file(best_dir / "checkpoint.pth")
    document = yaml.safe_load((best_dir / "schedule.yaml").read_text())
    provenance, steps = document["provenance"], document["steps"]
    assert provenance["member"] == record.policy_idx and provenance["iteration"] == record.iteration
    assert provenance["checkpoint_sha256"] == record.checksum and provenance["complete"] is True
    assert steps[0]["frame"] == 0
    assert [s["frame"] for s in steps] == sorted(s["frame"] for s in steps)
    # The last step's hyperparameters are the ones the checkpoint was trained with (its record's).
    assert steps[-1]["params"] == record.params
    assert provenance["ancestry"][-1]["member"] == record.policy_idx
    # pbt.replay accepts it as it is.
    loaded = load_schedule(best_dir / "schedule.yaml")
    initial, timed = plan(loaded, {k: None for k in steps[0]["params"]}, list(SETTERS))
    assert initial == steps[0]["params"] and len(timed) == len(steps) - 1


@pytest.mark.training
def test_schedule_of_the_replaced_member_starts_with_its_donors(pop):
    snapshot = read_snapshot(pop.workspace)
    lineages = snapshot.lineages
    event = [e for e in lineages[CRIPPLED] if e.action == "replace"][-1]  # the schedule follows the last
    record = snapshot.member(CRIPPLED).record
    assert record.iteration > event.iteration
    schedule = reconstruct_schedule(lineages, CRIPPLED, record.iteration, record.frame)
    donor = event.donor
    # Before its replacement the weights followed the donor's schedule, from the donor's start.
    assert schedule.steps[0].member == schedule.segments[0].member
    assert schedule.segments[-1].member == CRIPPLED
    assert any(s.member == donor for s in schedule.segments)
    replace = [s for s in schedule.steps if s.event == "replace" and s.member == CRIPPLED][-1]
    assert replace.donor == donor and replace.params == event.params_after
    donor_frame = [e.frame for e in lineages[donor] if e.iteration == event.donor_iteration
                   and e.mode != "startup"][-1]
    assert replace.member_frame == event.frame
    # The weights' frames at the replace are where the donor's part of their history ended: the
    # donor's frame count at its iteration, shifted by the donor's own replacements (either way: a
    # donor that took a slower peer's weights has trained them for fewer frames than it counts).
    donor_part = schedule.segments[-2]
    assert (donor_part.member, donor_part.member_to_frame) == (donor, donor_frame)
    assert replace.frame == donor_part.to_frame
    assert (schedule.segments[-1].from_frame, schedule.segments[-1].member_from_frame) == (replace.frame, event.frame)
    donor_startup = next(e for e in lineages[schedule.segments[0].member] if e.mode == "startup")
    assert schedule.steps[0].params == donor_startup.params_after


def test_analyze_cli_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pbt.analyze", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
                          cwd=str(REPO), env=worker_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


# -- schedule reconstruction on synthetic lineages --------------------------------------------------

LR = "train.params.config.learning_rate"
GAMMA = "train.params.config.gamma"


def entry(member, iteration, frame, action="keep", before=None, after=None, donor=None, donor_iteration=None,
          mode=None) -> LineageEntry:
    before = before or {}
    return LineageEntry(policy_idx=member, iteration=iteration, frame=frame, action=action, donor=donor,
                        donor_iteration=donor_iteration, mode=mode if action != "keep" else None,
                        params_before=before, params_after=after if after is not None else before, objective=0.0,
                        time=1000.0 + frame / 1000)


def test_reconstruct_without_replacement_is_own_schedule():
    p0, p1 = {LR: 1e-3, GAMMA: 0.99}, {LR: 5e-4, GAMMA: 0.99}
    lineage = [entry(0, 0, 0, "mutate", {LR: 1e-3, GAMMA: 0.98}, p0, mode="startup"), entry(0, 1, 100, before=p0),
               entry(0, 2, 200, "mutate", p0, p1, mode="inplace"), entry(0, 3, 300, before=p1),
               entry(0, 4, 400, "mutate", p1, {LR: 1e-4, GAMMA: 0.99}, mode="inplace")]
    schedule = reconstruct_schedule({0: lineage}, 0, 4, 400)
    # The mutation at iteration 4 came after the checkpoint of iteration 4 was published.
    assert [(s.frame, s.params, s.event) for s in schedule.steps] == [(0, p0, "startup"), (200, p1, "mutate")]
    assert [(s.member, s.from_frame, s.to_frame) for s in schedule.segments] == [(0, 0, 400)]
    assert schedule.complete


def test_reconstruct_follows_a_chain_of_replacements_with_frame_offsets():
    a, b, c, c2 = {LR: 1.0}, {LR: 2.0}, {LR: 3.0}, {LR: 4.0}
    lineages = {
        0: [entry(0, 0, 0, "mutate", {LR: 0.5}, a, mode="startup"), entry(0, 1, 100, before=a),
            entry(0, 2, 190, before=a), entry(0, 3, 290, before=a)],
        # member 1 takes member 0's iteration-2 checkpoint (trained 190 frames) at its own frame 250
        1: [entry(1, 0, 0, "mutate", {LR: 9.0}, {LR: 9.0}, mode="startup"), entry(1, 1, 120, before={LR: 9.0}),
            entry(1, 2, 250, "replace", {LR: 9.0}, b, donor=0, donor_iteration=2, mode="inplace"),
            entry(1, 3, 370, before=b), entry(1, 4, 480, before=b)],
        # member 2 takes member 1's iteration-4 checkpoint (member 1's frame 480) at its own frame 500
        2: [entry(2, 0, 0, "mutate", {LR: 7.0}, {LR: 7.0}, mode="startup"),
            entry(2, 3, 400, "mutate", {LR: 7.0}, {LR: 7.5}, mode="inplace"),
            entry(2, 4, 500, "replace", {LR: 7.5}, c, donor=1, donor_iteration=4, mode="exec"),
            entry(2, 5, 600, "mutate", c, c2, mode="inplace"), entry(2, 6, 700, before=c2)],
    }
    schedule = reconstruct_schedule(lineages, 2, 6, 700)
    # member 0: 190 frames; member 1 trained them from 250 to 480 (230 more: 420 in all);
    # member 2 from 500 to 700 (200 more: 620), with a mutation at its frame 600 (weights' 520).
    assert [(s.frame, s.params[LR], s.member, s.member_frame, s.event) for s in schedule.steps] == [
        (0, 1.0, 0, 0, "startup"), (190, 2.0, 1, 250, "replace"), (420, 3.0, 2, 500, "replace"),
        (520, 4.0, 2, 600, "mutate")]
    assert [(s.member, s.from_frame, s.to_frame, s.member_from_frame, s.member_to_frame)
            for s in schedule.segments] == [(0, 0, 190, 0, 190), (1, 190, 420, 250, 480), (2, 420, 620, 500, 700)]
    assert schedule.complete and not schedule.notes


def test_reconstruct_through_a_donor_that_took_a_slower_peers_weights():
    # Member 0 (fast) takes slow member 1's newest checkpoint (trained 200 frames) at its own frame
    # 500; member 2 then takes member 0's checkpoint of its frame 700: trained 200 + 200 = 400 frames,
    # fewer than member 0 counts. The weights' frames run behind the donor's own count.
    a, b, c = {LR: 1.0}, {LR: 2.0}, {LR: 3.0}
    lineages = {
        1: [entry(1, 0, 0, "mutate", {LR: 9.0}, a, mode="startup"), entry(1, 1, 100, before=a),
            entry(1, 2, 200, before=a)],
        0: [entry(0, 0, 0, "mutate", {LR: 9.0}, {LR: 9.0}, mode="startup"),
            entry(0, 5, 500, "replace", {LR: 9.0}, b, donor=1, donor_iteration=2, mode="inplace"),
            entry(0, 7, 700, before=b)],
        2: [entry(2, 0, 0, "mutate", {LR: 9.0}, {LR: 9.0}, mode="startup"),
            entry(2, 7, 720, "replace", {LR: 9.0}, c, donor=0, donor_iteration=7, mode="inplace"),
            entry(2, 8, 820, before=c)],
    }
    schedule = reconstruct_schedule(lineages, 2, 8, 820)
    assert [(s.frame, s.params[LR], s.member, s.member_frame, s.event) for s in schedule.steps] == [
        (0, 1.0, 1, 0, "startup"), (200, 2.0, 0, 500, "replace"), (400, 3.0, 2, 720, "replace")]
    assert [(s.member, s.from_frame, s.to_frame, s.member_from_frame, s.member_to_frame)
            for s in schedule.segments] == [(1, 0, 200, 0, 200), (0, 200, 400, 500, 700), (2, 400, 500, 720, 820)]


def test_reconstruct_with_a_missing_ancestor_is_marked_incomplete():
    lineages = {2: [entry(2, 0, 0, "mutate", {LR: 7.0}, {LR: 7.0}, mode="startup"),
                    entry(2, 2, 200, "replace", {LR: 7.0}, {LR: 3.0}, donor=5, donor_iteration=2, mode="inplace")]}
    schedule = reconstruct_schedule(lineages, 2, 3, 300)
    assert not schedule.complete and "member 5" in schedule.notes[0]
    assert [(s.frame, s.params[LR], s.event) for s in schedule.steps] == [(200, 3.0, "replace")]


def test_lineage_file_events_round_trip_through_json(tmp_path):
    # Guard for the report parser above: a reason containing '|' is escaped in the markdown table.
    from pbt.tools.report import md_table

    lines = md_table(["a", "b"], [["x|y", "z"]])
    assert lines[-1] == "| x\\|y | z |"
    assert json.loads(entry(0, 1, 2).to_json_line())["frame"] == 2
    assert LineageEntry.from_dict(json.loads(entry(0, 1, 2).to_json_line())) == entry(0, 1, 2)
