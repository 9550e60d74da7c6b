# %% [markdown]
# # hierfl from Python: runs and sweeps as pandas frames
#
# A notebook in the "percent" format (VS Code, PyCharm and Jupytext open each `# %%` block as a
# cell); `python examples/api_walkthrough.py` runs it top to bottom, and tests/interface/test_api.py runs it
# in the suite. Run it from the repository root.

# %%
import hierfl

# A run is the same as `hierfl run`: the scenario file, `--set`-style overrides, a seed.
# Without `out=` it is written to a temporary directory that is read back and removed.
r = hierfl.run("scenarios/hierfavg.yaml",
               overrides=["runtime.executor=local", "devices.count=12", "stop.virtual_time_s=60"], seed=3)
print(r)

# %%
# summary.json as a dict; metrics.jsonl as frames: `evals` (the evaluation lines), `events` (every line)
print(r.summary["rounds"], r.summary["final_accuracy"], r.summary["time_to_target_s"])
print(r.evals[["t", "round", "accuracy", "loss", "bytes_cloud"]].tail(3).to_string(index=False))
print(r.events["event"].value_counts().to_string())

# %%
# devices.csv, and the edge servers' members (one row per device and clusters.jsonl record)
print(r.devices.groupby("edge")["speed_sps"].describe()[["count", "mean"]].to_string())
print(r.clusters.groupby("cluster")["device"].count().to_string())

# %%
# Keep the files with `out=`, and read any run directory back later with `load_run`.
kept = hierfl.run("scenarios/hierfavg.yaml",
                  overrides=["runtime.executor=local", "devices.count=12", "stop.virtual_time_s=60"], seed=3,
                  out="runs/api_walkthrough")
again = hierfl.load_run("runs/api_walkthrough")
assert again.summary["final_accuracy"] == kept.summary["final_accuracy"] == r.summary["final_accuracy"]

# %%
# Time to reach 50 % accuracy, straight from the frame
reached = r.evals[r.evals["accuracy"] >= 0.5]
print("first >= 0.5 at t =", None if reached.empty else float(reached["t"].iloc[0]))

# %% [markdown]
# A sweep (needs `pip install 'hierfl[tune]'`) returns sweep.csv as a frame, one row per trial:
#
# ```python
# df = hierfl.sweep("scenarios/sweeps/stragglers_seeds.yaml", out="sweeps/stragglers_seeds")
# df.groupby("straggler.name")["final_accuracy"].agg(["mean", "std", "count"])
# df = hierfl.load_sweep("sweeps/stragglers_seeds")        # later, from the directory
# ```
