#!/usr/bin/env bash
# Tic-tac-toe recipe on CPU with the tiny offline model: teacher data -> SFT -> GRPO phase 1 -> GRPO phase 2,
# each phase followed by an eval vs the random and the optimal opponent. Run from the repository root.
# Teacher games: GAMES=4000 by default (200 never taught the 0.9M model legal moves; 2000 played worse; see README.md).
# TIE_BREAK=exploit (teacher's quiet moves: the never-losing move that wins most vs random; see README.md) or random.
# One command per phase: `bash examples/tictactoe/run.sh PHASE` with PHASE in init synth sft grpo1 grpo2 evals plot.
set -euo pipefail
R=runs/tictactoe
X=examples/tictactoe
N=${N:-100}   # games per eval
SIZE=${SIZE:-small}   # tiny model size: tiny (0.2M) | small (0.9M, measured best here) | base (4.3M)

ev() {  # ev NAME MODEL_DIR: greedy, vs the random and the optimal opponent, two seeds (-777 suffix for the second)
  for seed in 12345 777; do
    for opp in random optimal; do
      if [ $opp = random ]; then p=1.0; else p=0.0; fi
      sfx=""; if [ $seed != 12345 ]; then sfx="-$seed"; fi
      toolgym eval tictactoe -m "hf:$2" -n "$N" -c 64 -t 0 --max-tokens 144 --seed $seed \
        -a transport=inprocess -a min_random_move_prob=$p -a max_random_move_prob=$p -o "$R/eval/$1-vs-$opp$sfx"
    done
  done
}

case "${1:-all}" in
  init)  toolgym model init-tiny --out $R/tiny --size "$SIZE" ;;
  synth) toolgym synth tictactoe --teacher scripted:imperfect --teacher-arg mistake_prob=0.3 --teacher-arg tie_break="${TIE_BREAK:-preference}" -n "${GAMES:-4000}" \
           --drop-if loss --require-valid -a transport=inprocess -a min_random_move_prob=0.2 \
           -a max_random_move_prob=0.7 -a num_groups=4 -o $R/teacher.jsonl --hf-out $R/teacher_hf ;;
  sft)   toolgym sft $X/sft.toml && ev sft $R/sft/final ;;
  grpo1) toolgym train $X/grpo_phase1.toml && ev grpo1 $R/grpo1/final ;;
  grpo2) toolgym train $X/grpo_phase2.toml && ev grpo2 $R/grpo2/final ;;
  evals) ev base $R/tiny; ev sft $R/sft/final; ev grpo1 $R/grpo1/final; ev grpo2 $R/grpo2/final ;;
  plot)  toolgym plot $R/grpo1 $R/grpo2 -o $R/curves.png && python $X/results_table.py $R ;;
  all)   for p in init synth sft grpo1 grpo2 plot; do bash "$0" $p; done ;;
  *) echo "unknown phase $1"; exit 2 ;;
esac
