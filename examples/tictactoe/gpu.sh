#!/usr/bin/env bash
# The tic-tac-toe RL recipe at the seed's scale, for one GPU (CUDA); see docs/training/tictactoe-recipe.md#gpu-readiness.
# `nohub` ran once on an H200 (2026-11-28, the numbers there); `hub` has not run on a GPU. Run from the repository
# root, with the train extra installed (and vllm for `hub`):
#   bash examples/tictactoe/gpu.sh nohub   no model hub: `run.sh forced` with a ~30M model built offline (--size
#                                          large): the same teacher rows, SFT, then GRPO on full games with 256
#                                          games per step (nohub_grpo.toml: stops after 4 min of steps), evals.
#   bash examples/tictactoe/gpu.sh hub     a 0.6-2.6B chat model with tool calling from the hub (MODEL, default
#                                          LiquidAI/LFM2-1.2B): SFT with LoRA on ~200 minimax-teacher games (losses
#                                          dropped), GRPO phase 1 (opponent 0.2-0.7) and phase 2 (0-0.25, T 1.25),
#                                          vLLM rollouts with the weights synced after every step, evals.
# Both end with 200 greedy games vs the random and the optimal opponent on a fresh seed and the quiet positions.
set -euo pipefail
R=runs/tictactoe
X=examples/tictactoe
G=$X/gpu
EVAL_SEED=${EVAL_SEED:-2718}

evals() {  # evals NAME MODEL_DIR MAXTOK: 200 games per opponent on EVAL_SEED, every quiet position (greedy)
  for opp in random optimal; do
    if [ $opp = random ]; then p=1.0; else p=0.0; fi
    toolgym eval tictactoe -m "hf:$2" -n 200 -c 256 -t 0 --max-tokens "$3" --seed "$EVAL_SEED" -a transport=inprocess \
      -a min_random_move_prob=$p -a max_random_move_prob=$p -o "$R/eval/$1-games200-$opp" --resume
  done
  toolgym eval tictactoe -m "hf:$2" -n 0 -c 256 -t 0 --max-tokens "$3" -a transport=inprocess -a task=move \
    -a kinds=quiet -o "$R/eval/$1-positions-quiet" --resume
}

case "${1:-}" in
  nohub)
    N=$R/gpu-nohub
    mkdir -p $N
    if [ ! -f $R/forced/games.jsonl ]; then bash $X/run.sh forced-data; fi
    t0=$SECONDS
    toolgym model init-tiny --out $N/tiny --size large --corpus-file $R/forced/positions.jsonl \
      --corpus-file $R/forced/games.jsonl
    toolgym sft $G/nohub_sft.toml
    echo "nohub sft $(( SECONDS - t0 )) s" >> $R/times.txt
    t0=$SECONDS
    toolgym train $G/nohub_grpo.toml
    echo "nohub grpo $(( SECONDS - t0 )) s" >> $R/times.txt
    evals gpu-nohub-sft $N/sft/final 200
    evals gpu-nohub-grpo $N/grpo/final 200
    python $X/results_table.py $R gpu-nohub-sft gpu-nohub-grpo ;;
  hub)
    MODEL=${MODEL:-LiquidAI/LFM2-1.2B}
    N=$R/gpu-hub
    mkdir -p $N
    toolgym synth tictactoe --teacher scripted:minimax --teacher-arg think=track --teacher-arg tie_break=random \
      -a transport=inprocess -a min_random_move_prob=0 -a max_random_move_prob=1 -a num_groups=4 -n 200 \
      --drop-if loss --require-valid -o $N/games.jsonl
    t0=$SECONDS
    toolgym sft $G/hub_sft.toml -s model="$MODEL"
    echo "hub sft $(( SECONDS - t0 )) s" >> $R/times.txt
    t0=$SECONDS
    toolgym train $G/hub_grpo1.toml
    toolgym train $G/hub_grpo2.toml
    echo "hub grpo $(( SECONDS - t0 )) s" >> $R/times.txt
    for m in sft rl1 rl2; do evals gpu-hub-$m $N/$m/final 512; done
    python $X/results_table.py $R gpu-hub-sft gpu-hub-rl1 gpu-hub-rl2 ;;
  *) echo "usage: gpu.sh nohub|hub"; exit 2 ;;
esac
