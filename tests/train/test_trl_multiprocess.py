"""Multi-process GRPO through TRL + accelerate on CPU: `examples/trl_tictactoe/train.py` launched by
`accelerate launch --multi_gpu --num_processes 2` (torchrun; the script trains on CPU, so DDP runs over gloo), with
TRL's `GRPOTrainer` and toolgym's `TRLEnv("tictactoe")` in each process and the committed tiny tic-tac-toe model.

Launches (35–56 s in all on the shared 2-core box; per-test time limits 240 + 150 + 180 s, under 10 min):

1. 2 steps, a checkpoint after each. Both ranks take the same optimizer steps; after every step their parameters
   hash identically although their rollouts differ (so the gradients were all-reduced), and the weights moved from
   the start; each rank runs its own `mcp-server-tictactoe` (disjoint PIDs) and made its own tool calls; TRL's
   logs (rewards per rubric entry, tool-call accuracy rates) are written and printed once per step (rank 0), not
   once per process; the checkpoint holds one RNG state per rank.
2. `--resume --max-steps 3`: both ranks start from step 2 with the step-2 weights of launch 1 and take step 3,
   which changes the weights again.
3. The multi-node lines (`--num_machines 2 --machine_rank 0|1 --main_process_ip --main_process_port`), two
   launchers on this host with one process each: one world of 2, in sync.
4. A rank SIGKILLed mid-run: `accelerate launch` exits non-zero within seconds, its error names the killed rank
   and the signal, and no worker or MCP server process is left.

Why `--multi_gpu` on a CPU box: accelerate 1.15 `launch --cpu --num_processes 2` starts ONE process (its simple
launcher; several need an `mpirun` hostfile); `--multi_gpu` picks the torchrun launcher, and `use_cpu` in the script
(no CUDA here) makes accelerate set up `MULTI_CPU` with the gloo backend. Checked here: `world_size` is 2 in each
rank's log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("accelerate")
pytest.importorskip("toolgym_tictactoe")
psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "trl_tictactoe" / "train.py"
STEP_KEYS = ("rewards/outcome/mean", "rewards/format_ok/mean", "rewards/tool_exec_ok/mean",
             "rewards/tool_args_ok/mean", "tools/call_frequency", "reward")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mcp-server-tictactoe") is None
                       and not (Path(sys.executable).parent / "mcp-server-tictactoe").exists(),
                       reason="mcp-server-tictactoe not installed"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_cmd(out: Path, *script_args: str, machines: list[str] | None = None) -> list[str]:
    """`accelerate launch` of the example, 2 processes in all; `machines` replaces `--num_machines 1` (multi-node)."""
    nodes = machines or ["--num_machines", "1", "--main_process_port", str(_free_port())]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", *nodes,
            "--mixed_precision", "no", "--dynamo_backend", "no", str(SCRIPT), "--output-dir", str(out),
            "--per-device-batch", "2", "--num-generations", "4", "--max-completion-length", "384",
            *script_args]


def _env() -> dict[str, str]:
    return {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
            "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONUNBUFFERED": "1"}


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a launcher and everything under it (torchrun starts each worker in its own session, so a process
    group kill would miss them; their MCP servers exit when their stdin closes)."""
    try:
        procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()


def _finish(proc: subprocess.Popen, timeout: float) -> str:
    """The launcher's output once it exits; past `timeout` the whole tree is killed and the test fails."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        pytest.fail(f"accelerate launch still running after {timeout:.0f}s:\n{proc.communicate()[0][-4000:]}")


def _run(out: Path, *script_args: str, timeout: float = 110) -> str:
    t0 = time.perf_counter()
    proc = _start(_launch_cmd(out, *script_args))
    log = _finish(proc, timeout)
    assert proc.returncode == 0, log[-6000:]
    print(f"launch {' '.join(script_args)}: {time.perf_counter() - t0:.1f}s")
    return log


def _ranks(out: Path) -> dict[int, list[dict]]:
    files = sorted((out / "ranks").glob("rank*.jsonl"))
    return {int(f.stem[4:]): [json.loads(x) for x in f.read_text().splitlines()] for f in files}


def _steps(lines: list[dict]) -> dict[int, dict]:
    return {x["step"]: x for x in lines if x["event"] == "step"}


def _printed_logs(log: str) -> int:
    """TRL/Trainer step logs printed to the console (`{'loss': ...}` lines; PrinterCallback prints on rank 0 only)."""
    return sum(1 for line in log.splitlines() if line.startswith("{'loss'"))


@pytest.mark.timeout(240)
def test_two_processes_sync_log_once_and_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    log = _run(out, "--max-steps", "2", "--save-steps", "1")

    ranks = _ranks(out)
    assert sorted(ranks) == [0, 1], ranks.keys()
    begin = {r: lines[0] for r, lines in ranks.items()}
    assert all(b["event"] == "begin" and b["step"] == 0 and b["world_size"] == 2 for b in begin.values()), begin
    assert begin[0]["pid"] != begin[1]["pid"]
    steps = {r: _steps(lines) for r, lines in ranks.items()}
    assert list(steps[0]) == list(steps[1]) == [1, 2]  # the same optimizer steps on both ranks
    assert begin[0]["sha256"] == begin[1]["sha256"]
    for s in (1, 2):
        assert steps[0][s]["sha256"] == steps[1][s]["sha256"], f"weights differ between ranks after step {s}"
    assert steps[0][1]["sha256"] != begin[0]["sha256"], "the first step did not change the weights"
    # the ranks trained on different rollouts (their own games): identical weights come from synchronised gradients
    assert any(steps[0][s]["rollouts_sha256"] != steps[1][s]["rollouts_sha256"] for s in (1, 2))
    # each rank runs its own MCP server and made its own calls through it
    servers = {r: {p for x in lines for p in x["mcp_servers"]} for r, lines in ranks.items()}
    assert servers[0] and servers[1] and not servers[0] & servers[1], servers
    for r in (0, 1):
        assert sum(x["mcp_calls"] for x in steps[r].values()) > 0, f"rank {r} made no tool call"
        assert all(x["reward_errors"] == 0 for x in ranks[r])

    # logged once per step (rank 0), with the rubric's rewards and the tool-call accuracy rates
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    step_logs = [m for m in metrics if "loss" in m]
    assert [m["step"] for m in step_logs] == [1, 2], metrics
    for m in step_logs:
        assert all(m.get(k) is not None for k in STEP_KEYS), m
    assert _printed_logs(log) == 2, "step logs printed more than once per step"

    ckpt = out / "checkpoint-2"
    assert (ckpt / "rng_state_0.pth").is_file() and (ckpt / "rng_state_1.pth").is_file()
    assert (ckpt / "optimizer.pt").is_file() and (ckpt / "model.safetensors").is_file()

    # resume from checkpoint-2 and go one step further
    log = _run(out, "--max-steps", "3", "--save-steps", "1", "--resume")
    ranks = _ranks(out)
    for r in (0, 1):
        second = [x for x in ranks[r] if x["pid"] != begin[r]["pid"]]
        assert second[0]["event"] == "begin" and second[0]["step"] == 2, second
        assert second[0]["sha256"] == steps[r][2]["sha256"], "resumed weights are not the step-2 weights"
        assert [x["step"] for x in second[1:]] == [3]
    third = {r: _steps(ranks[r])[3] for r in (0, 1)}
    assert third[0]["sha256"] == third[1]["sha256"]
    assert third[0]["sha256"] != steps[0][2]["sha256"], "the resumed step did not change the weights"
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2, 3]
    assert _printed_logs(log) == 1
    assert (out / "checkpoint-3" / "trainer_state.json").is_file()


@pytest.mark.timeout(150)
def test_multi_node_launch_lines(tmp_path: Path) -> None:
    """The documented multi-node lines, unchanged, on one host: two launchers (`--num_machines 2`, `--machine_rank
    0/1`, `--main_process_ip 127.0.0.1`, `--main_process_port P`), one process each, one output folder (as on a
    shared filesystem). They form one world of 2 and stay in sync."""
    out, port = tmp_path / "run", str(_free_port())
    procs = []
    t0 = time.perf_counter()
    for rank in ("0", "1"):
        nodes = ["--num_machines", "2", "--machine_rank", rank, "--main_process_ip", "127.0.0.1",
                 "--main_process_port", port]
        procs.append(_start(_launch_cmd(out, "--max-steps", "1", "--save-steps", "1", machines=nodes)))
    try:
        logs = [_finish(p, 130) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_tree(p)
    print(f"two launchers: {time.perf_counter() - t0:.1f}s")
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-4000:]
    ranks = _ranks(out)
    assert sorted(ranks) == [0, 1]
    assert all(x["world_size"] == 2 for lines in ranks.values() for x in lines)
    steps = {r: _steps(lines) for r, lines in ranks.items()}
    assert list(steps[0]) == list(steps[1]) == [1]
    assert steps[0][1]["sha256"] == steps[1][1]["sha256"] != ranks[0][0]["sha256"]
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [1]  # written by world rank 0 only
    # transformers prints the log on each node's local rank 0 (PrinterCallback): once per node here
    assert [_printed_logs(log) for log in logs] == [1, 1]


@pytest.mark.timeout(180)
def test_killed_rank_fails_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _start(_launch_cmd(out, "--max-steps", "200", "--save-steps", "1000"))
    try:
        deadline = time.monotonic() + 100
        rank1 = out / "ranks" / "rank1.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:  # wait until training is under way
            if rank1.is_file() and any(json.loads(x)["event"] == "step" for x in rank1.read_text().splitlines()):
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        ranks = _ranks(out)
        pid0, pid1 = ranks[0][0]["pid"], ranks[1][0]["pid"]
        servers = {p for lines in ranks.values() for x in lines for p in x["mcp_servers"]}
        os.kill(pid1, signal.SIGKILL)
        t0 = time.monotonic()
        output = _finish(proc, 60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
    print(f"launcher exited {took:.1f}s after the kill, rc {proc.returncode}")
    assert proc.returncode != 0
    assert took < 60, f"the run took {took:.0f}s to fail after a rank was killed"
    root = output.split("Root Cause", 1)[-1]
    assert "Root Cause" in output and "rank      : 1 (local_rank: 1)" in root, output[-3000:]
    assert f"exitcode  : -9 (pid: {pid1})" in root and "SIGKILL" in root, output[-3000:]
    # nothing left behind: the other rank and every rank's MCP server are gone
    end = time.monotonic() + 30
    alive = {p for p in (pid0, pid1, *servers) if psutil.pid_exists(p)}
    while alive and time.monotonic() < end:
        time.sleep(0.5)
        alive = {p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
    assert not alive, f"processes left after the failed run: {alive}"
