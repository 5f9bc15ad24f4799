"""`examples/tictactoe/results_table.py` on eval folders laid out as the recipe's `run.sh` writes them, made by real
`toolgym eval` runs of scripted players through the tic-tac-toe MCP server: the optimal player's row reads 100 %
optimal on the held-out positions and no losses, the random player's row less, with pooled games over both seeds."""

from __future__ import annotations

import re
from pathlib import Path

from tg_testutil import example_module
from typer.testing import CliRunner

from toolgym.cli import app


def _table_module():  # type: ignore[no-untyped-def]
    return example_module("examples/tictactoe/results_table.py")


def _eval(out: Path, player: str, *args: str) -> None:
    res = CliRunner().invoke(app, ["eval", "tictactoe", "-m", f"scripted:{player}", "-c", "8", "-a",
                                   "transport=inprocess", *args, "-o", str(out)])
    assert res.exit_code == 0, res.output


def test_results_table_from_real_eval_folders(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    ev = tmp_path / "eval"
    for player in ("minimax", "random"):
        _eval(ev / f"{player}-positions-heldout", player, "-n", "0", "-a", "task=move", "-a", "split=heldout")
        for seed in ("12345", "777"):
            for opp, p in (("random", "1.0"), ("optimal", "0.0")):
                _eval(ev / f"{player}-games-{opp}-{seed}", player, "-n", "6", "--seed", seed,
                      "-a", f"min_random_move_prob={p}", "-a", f"max_random_move_prob={p}")
    mod = _table_module()
    assert mod.models(tmp_path) == ["minimax", "random"]
    mod.main([str(tmp_path)])
    printed = capsys.readouterr().out
    tables = printed.split("\n\n")

    def rows_of(table: str) -> dict[str, list[str]]:
        return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
                for line in table.splitlines() if line.startswith("| ")}

    rows = rows_of(tables[0])
    best, rand = rows["minimax"], rows["random"]
    assert best[0].startswith("100.0 (") and best[1].startswith("100.0 (")  # held-out optimal, legal
    assert best[2] == best[3] == "-"  # no whole-set eval in this folder
    w, d, loss = map(float, best[5].split("/"))  # vs optimal: draws only
    assert loss == 0.0 and abs(w + d + loss - 100.0) < 0.2
    assert best[6].startswith("100.0 (")  # every call valid
    assert float(re.match(r"[\d.]+", rand[0]).group()) < 80.0  # a random mover is seldom optimal
    # the games table with intervals, and the shortcut ceilings beside it (exact: copy-else-random loses 47.0 %)
    games = rows_of(tables[1])
    assert games["minimax"][5].startswith("0.0 (0.0-") and games["minimax"][7].startswith("100.0 (")
    assert games["minimax"][6] == "0.0"  # no game ran out of turns
    assert games["shortcut `copy` (exact)"][3:7] == ["0.0", "53.0", "47.0", "0"]
    assert set(games) >= {"minimax", "random", *(f"shortcut `{s}` (exact)" for s in ("random", "first-free", "copy"))}
    # --pool: losses against the optimal opponent pooled over runs, each run's per-seed counts beside the total
    lost = sum(mod.losses(tmp_path, "random")[0])
    mod.main([str(tmp_path), "--pool", "both=minimax,random", "--pool=alone=random"])
    pools = rows_of(capsys.readouterr().out)
    assert pools["both"][0] == "2" and pools["both"][3] == "24" and pools["alone"][3] == "12"
    assert pools["both"][1].startswith("minimax: 0+0; random: ")
    assert pools["both"][2].startswith(f"{100 * lost / 24:.1f} (") and pools["alone"][2].startswith(f"{100 * lost / 12:.1f} (")
    # ... and the wins against the random opponent pooled the same way (12 games per run: both seeds)
    won = {p: mod.games(tmp_path, p, "random")["win"] for p in ("minimax", "random")}
    assert pools["both"][5] == "24" and pools["alone"][5] == "12" and won["minimax"] > won["random"]
    assert pools["both"][4].startswith(f"{100 * (won['minimax'] + won['random']) / 24:.1f} (")
    assert pools["alone"][4].startswith(f"{100 * won['random'] / 12:.1f} (")
    # ... and the losses' interval with the games clustered by seed (both runs played the same 12 seeds)
    assert pools["both"][6].startswith(f"{100 * lost / 24:.1f} (")
    assert pools["alone"][6].startswith(f"{100 * lost / 12:.1f} (")
    assert sum(n for _, n in mod.seed_losses(tmp_path, "random").values()) == 12
    # a resumed eval's file that holds a re-run of a rollout: still counted once
    f = next(tmp_path.rglob("*random*optimal*/results.jsonl"), None) or next(
        p for p in tmp_path.rglob("results.jsonl") if "random" in str(p) and "optimal" in str(p))
    f.write_text(f.read_text() + f.read_text().splitlines()[0] + "\n")
    assert sum(n for _, n in mod.seed_losses(tmp_path, "random").values()) == 12


def test_clustered_interval_widens_for_games_that_share_a_seed() -> None:
    """`clustered_rate` on counts built by hand: two models that play every seed alike are one sample, not two --
    their pooled interval is as wide as one model's (the Wilson interval over the doubled games narrows by about
    sqrt 2); games that differ within each seed (one lost, one not) carry no seed-to-seed spread and count as
    independent games."""
    mod = _table_module()
    one = [(1, 1)] * 10 + [(0, 1)] * 90  # one model: 10 of 100 seeds lost

    def width(text: str) -> float:
        lo, hi = map(float, re.search(r"\(([\d.]+)-([\d.]+)\)", text).groups())
        return hi - lo

    alike = [(2 * k, 2 * n) for k, n in one]  # a second model that plays each seed the same way
    assert mod.clustered_rate(alike).startswith("10.0 (") and mod.clustered_rate(one).startswith("10.0 (")
    assert abs(width(mod.clustered_rate(alike)) - width(mod.clustered_rate(one))) < 0.11
    assert width(mod.rate(20, 200)) < 0.8 * width(mod.clustered_rate(alike))
    assert mod.clustered_rate([(1, 2)] * 100) == mod.rate(100, 200)  # no spread between clusters: as independent
    assert mod.clustered_rate([(1, 1)]) == "-" and mod.clustered_rate([]) == "-"


def test_losses_script_names_the_move_that_lost_each_game(tmp_path: Path) -> None:
    """`examples/tictactoe/losses.py` on real games of the random player against the optimal opponent: every lost
    game is traced to a position where X could still draw and played a move outside its optimal set (checked by
    replaying to it), or counted as a turn-cap loss; the optimal player's games lose nothing."""
    mod = example_module("examples/tictactoe/losses.py")
    from toolgym_tictactoe import positions as P

    for player in ("random", "minimax"):
        _eval(tmp_path / player, player, "-n", "24", "--seed", "5", "-a", "min_random_move_prob=0",
              "-a", "max_random_move_prob=0")
    n, losses, where = mod.lost_at(tmp_path / "random")
    assert n == 24 and losses >= 8 and sum(where.values()) == losses
    assert all(map(mod.is_class, where))  # no invalid calls: every loss at a value-losing move
    for board in where:
        pos = P.analyze(board)
        assert board == P.canonical(board) and pos.value >= 0 and pos.kind in ("quiet", "free", "block", "win")
    assert mod.lost_at(tmp_path / "minimax")[1] == 0
    # an errored rollout is a lost game of its own row, never dropped
    import json
    res = tmp_path / "minimax" / "results.jsonl"
    rec = json.loads(res.read_text().splitlines()[0])
    res.write_text(res.read_text() + json.dumps({**rec, "example_id": 99, "error": "server died"}) + "\n")
    assert mod.lost_at(tmp_path / "minimax") == (25, 1, {mod.ERRORED: 1})
    # a loss with no value-losing move (invalid moves: a forfeit or the turn cap) is keyed by the board it stopped on,
    # two mirror images pooled in one class
    rec = json.loads(res.read_text().splitlines()[0])
    for i, moves in enumerate((["O0", "X4"], ["O2", "X4"])):
        info = {**rec["info"], "start": "." * 9, "result": {**rec["info"]["result"], "status": "loss", "moves": moves,
                                                             "board": "O...X...." if i == 0 else "..O.X...."}}
        res.write_text(res.read_text() + json.dumps({**rec, "example_id": 100 + i, "info": info,
                                                     "metrics": {**rec["metrics"], "loss": 1.0}}) + "\n")
    stopped = f"{mod.INVALID} {P.canonical('O...X....')}"
    assert mod.lost_at(tmp_path / "minimax") == (27, 3, {mod.ERRORED: 1, stopped: 2})
    assert not mod.is_class(stopped) and mod.is_class(P.canonical("O...X...."))
    # constructed: X (moving second) takes an edge after O's corner -- the first move outside the optimal set
    assert mod.first_blunder("." * 9, ["O0", "X1", "O4", "X8", "O3", "X5", "O6"]) == "O........"
    assert mod.first_blunder("." * 9, ["O0", "X4", "O8", "X1"]) is None  # every X move kept the draw
    # a sixteenth-round loss: at XO..XO..O (O threatens 2) X plays 6, a fork (3 and 2) instead of the block
    assert mod.blunder("." * 9, ["O5", "X4", "O1", "X0", "O8", "X6", "O2"]) == ("XO..XO..O", 6)
    assert mod.threats_made("XO..XO..O", 6) == 2 and mod.threats_made("XOO.X...O", 6) == 1
    assert mod.threats_made("." * 9, 4) == 0


def test_game_folders_take_every_200_game_seed_of_a_model_and_no_other_models(tmp_path: Path) -> None:
    """The 200-game folders of one model against one opponent: the recipe's two test seeds (`games200`,
    `games200b`) and any third (`games200c`), sorted; not another opponent's, not a longer model name's."""
    ev = tmp_path / "eval"
    for name in ("m-games200-optimal", "m-games200b-optimal", "m-games200c-optimal", "m-games200-random",
                 "m-fresh-games200-optimal", "m-games2000-optimal"):
        (ev / name).mkdir(parents=True)
    mod = _table_module()
    got = [f.name for f in mod.game_folders(tmp_path, "m", "optimal")]
    assert got == ["m-games200-optimal", "m-games200b-optimal", "m-games200c-optimal"]
    assert [f.name for f in mod.game_folders(tmp_path, "m-fresh", "optimal")] == ["m-fresh-games200-optimal"]
    assert mod.game_folders(tmp_path, "other", "optimal") == []
