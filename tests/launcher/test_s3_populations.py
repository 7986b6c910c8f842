"""The launcher's view of a population whose workspace is an ``s3://`` URL: it stays the URL (a
path would be made absolute and fold its ``//``). No torch, no server."""
from pbt.launcher.populations import populations
from pbt.launcher.run_description import Member


def member(index: int, workspace_arg: str) -> Member:
    return Member(experiment="exp", index=index, name=f"exp_{index}", params={},
                  argv=["python", "-m", "pbt.train", f"pbt.policy_idx={index}", workspace_arg], env={},
                  experiment_dir="/runs/exp", workspace=None, log_path=f"/runs/exp/{index}.log")


def test_an_s3_workspace_is_one_population_named_by_its_url() -> None:
    members = [member(i, "pbt.workspace=s3://pbt-runs/pendulum") for i in range(3)]
    (population,) = populations(members)
    assert population.workspace == "s3://pbt-runs/pendulum"
    assert sorted(population.members) == [0, 1, 2]


def test_a_relative_directory_workspace_is_still_made_absolute() -> None:
    (population,) = populations([member(0, "pbt.workspace=ws")])
    assert population.workspace.startswith("/") and population.workspace.endswith("/ws")
