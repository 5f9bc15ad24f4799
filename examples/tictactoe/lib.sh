# The variables and helpers of run.sh (sourced by it; not run on its own): eval shorthands, timed/long jobs, the
# starts the rounds begin from, and the arm runners of the GRPO rounds.
R=runs/tictactoe
X=examples/tictactoe
SIZE=${SIZE:-small}
TEACH=(--teacher scripted:minimax --teacher-arg think=track --teacher-arg tie_break=exploit)
# the forced start's teacher: every win taken, every threat blocked, every other move a random free cell
FT=(--teacher scripted:imperfect --teacher-arg mistake_prob=1.0 --teacher-arg mistakes=quiet
    --teacher-arg think=track --teacher-arg tie_break=exploit -a transport=inprocess)
MAXTOK=200   # the longest teacher turn (scan with marks and the running forced move, fork line, call) is 163 tokens

positions() {  # positions NAME MODEL_DIR SPLIT: one-move tasks on every position of SPLIT (all | heldout), greedy
  toolgym eval tictactoe -m "hf:$2" -n 0 -c 64 -t 0 --max-tokens $MAXTOK -a transport=inprocess -a task=move \
    -a split="$3" -o "$R/eval/$1-positions-$3" --resume
}
games() {  # games NAME MODEL_DIR: 100 games per eval seed (12345, 777) vs the random and the optimal opponent, greedy
  for seed in 12345 777; do
    for opp in random optimal; do
      if [ $opp = random ]; then p=1.0; else p=0.0; fi
      toolgym eval tictactoe -m "hf:$2" -n 100 -c 64 -t 0 --max-tokens $MAXTOK --seed $seed -a transport=inprocess \
        -a min_random_move_prob=$p -a max_random_move_prob=$p -o "$R/eval/$1-games-$opp-$seed" --resume
    done
  done
}
rl_evals() {  # rl_evals NAME MODEL_DIR SEED: the 937 held-out positions + 200 greedy games per opponent on SEED
  positions "$1" "$2" heldout
  games200 "$1-games200-random" "$2" "$3" 1.0
  games200 "$1-games200-optimal" "$2" "$3" 0.0
}
games200() {  # games200 NAME MODEL_DIR SEED P: 200 greedy games on SEED vs the opponent of random-move probability P
  toolgym eval tictactoe -m "hf:$2" -n 200 -c 64 -t 0 --max-tokens $MAXTOK --seed "$3" -a transport=inprocess \
    -a min_random_move_prob=$4 -a max_random_move_prob=$4 -o "$R/eval/$1" --resume
}
optimal200() { games200 "$1" "$2" "$3" 0; }  # optimal200 NAME MODEL_DIR SEED: vs the optimal opponent -> eval/NAME
moves3() {  # moves3 NAME MODEL_DIR N T: N moves at temperature T on each quiet three-mark training board -> eval/NAME
  toolgym eval tictactoe -m "hf:$2" -n 0 -r "$3" -c 64 -t "$4" --max-tokens $MAXTOK -a transport=inprocess \
    -a task=move -a kinds=quiet -a "position_pieces=[3]" -o "$R/eval/$1" --resume
}
greedy3() {  # greedy3 NAME MODEL_DIR: every quiet three-mark training board, greedy and 32 samples at T 1.0 (the
  # training games' temperature), then decisions.py --greedy: where greedy play loses the value, do the samples too?
  moves3 "$1-greedy3" "$2" 1 0
  moves3 "$1-sampled3-t10" "$2" 32 1.0
  python $X/decisions.py "$R/eval/$1-sampled3-t10" --greedy "$R/eval/$1-greedy3" --all
}
sampled3() {  # sampled3 NAME MODEL_DIR: 8 moves at T 0.7 on each quiet three-mark board, then decisions.py on them
  moves3 "$1" "$2" 8 0.7
  python $X/decisions.py "$R/eval/$1" --all --classes ....XO.O. ....XOO.. ..O.X.O..
}
arm_evals() {  # arm_evals ARM RUN_DIR: rl_evals of the step-60 model on seed 2718 and where its games were lost,
  # then the same for the best periodic-eval checkpoint (best_step.py: fewest losses on the periodic eval's own seeds)
  rl_evals forced-$1 $2/final 2718
  python $X/losses.py $R/eval/forced-$1-games200-optimal
  local n M
  n=$(python $X/best_step.py $2/metrics.jsonl)
  M=$2/checkpoints/step_$(printf %06d $n)/model
  if [ "$n" != 60 ] && [ -d $M ]; then
    rl_evals forced-$1-best $M 2718
    python $X/losses.py $R/eval/forced-$1-best-games200-optimal
  fi
}
exact() {  # exact NAME MODEL_DIR [random]: every line of play against the perfect (or the random) opponent once,
  # weighted by its chance (exact_games.py: exact W/D/L, no sampling noise) -> eval/exact/NAME[-random].json
  local opp=${3:-optimal} out="$R/eval/exact/$1${3:+-$3}.json"
  mkdir -p "$R/eval/exact"
  [ -f "$out" ] || python $X/exact_games.py "hf:$2" --opponent $opp --max-tokens $MAXTOK --json "$out"
}
served() {  # served NAME MODEL_URI [random]: the model as a client meets it, toolgym serve's suggest_move asked for every
  # board of every line of play against the optimal (or the random) opponent (served_exact.py) -> eval/served/NAME-OPP.json
  local opp=${3:-optimal}
  local out="$R/eval/served/$1-$opp.json"
  mkdir -p "$R/eval/served"
  [ -f "$out" ] || python $X/served_exact.py "$2" --opponent $opp --json "$out"
}
quiet() {  # quiet NAME MODEL_DIR: every quiet position (467: no win, no threat, some move loses the value), greedy
  toolgym eval tictactoe -m "hf:$2" -n 0 -c 64 -t 0 --max-tokens $MAXTOK -a transport=inprocess -a task=move \
    -a kinds=quiet -o "$R/eval/$1-positions-quiet" --resume
}
discover() {  # discover ARM [MODEL_DIR]: every quiet position for MODEL_DIR (runs/tictactoe/forced-late/ARM/final), then
  # discovery.py against the late start's (forced-late-sft) -> eval/forced-ARM-discovery.json
  quiet forced-$1 ${2:-$R/forced-late/$1/final}
  python $X/discovery.py $R/forced-late/$1 start=$R/eval/forced-late-sft-positions-quiet \
    rl=$R/eval/forced-$1-positions-quiet --json $R/eval/forced-$1-discovery.json
}
long() {  # long CMD...: a long CPU job, one at a time on the shared machine (flock on LOCK, if flock is installed)
  if command -v flock >/dev/null; then flock "${LOCK:-/tmp/toolgym-cpu-long.lock}" "$@"; else "$@"; fi
}
timed() {  # timed NAME CMD...: run and record the wall time of a phase in $R/times.txt
  local t0=$SECONDS
  "${@:2}"
  echo "$1 $(( SECONDS - t0 )) s" >> $R/times.txt
}

retry_start() {  # the eighth round's start, runs/tictactoe/forced-retry/sft/final, built if absent: the forced
  # teacher's positions and 600 of its games in which it first calls an occupied cell on 30 % of its moves, reads the
  # error and plays its move (the invalid turn is context, out of the loss); forced_sft.toml's 2,000 steps on 1 thread
  local N=$R/forced-retry
  mkdir -p $N
  [ -f $R/forced/positions.jsonl ] || bash $X/run.sh forced-data
  [ -d $N/sft/final ] && return 0
  [ -f $N/games.jsonl ] || toolgym synth tictactoe "${FT[@]}" --teacher-arg invalid_prob=0.3 -a min_random_move_prob=0 \
    -a max_random_move_prob=1 -a num_groups=4 -n 600 --drop-if heldout_visits --failed-turns context -o $N/games.jsonl
  [ -d $N/tiny ] || toolgym model init-tiny --out $N/tiny --size "$SIZE" --corpus-file $R/forced/positions.jsonl \
    --corpus-file $N/games.jsonl
  local rows=$(( $(wc -l < $R/forced/positions.jsonl) + $(wc -l < $N/games.jsonl) ))
  timed forced-retry-sft long toolgym sft $X/forced_sft.toml -s model=$N/tiny -s output_dir=$N/sft \
    -s epochs=$(python -c "print(round(2000 * 8 / $rows, 4))") -d $R/forced/positions.jsonl -d $N/games.jsonl --resume
}
late_start() {  # the ninth round's start, runs/tictactoe/forced-late/sft2/final (where the later rounds begin), built
  # if absent: the retry start continued for two epochs on the same teacher with free_list=true (late_data.py,
  # late_sft.toml); `run.sh forced-late-start` puts the committed copy there instead
  local N=$R/forced-late
  mkdir -p $N
  [ -d $N/sft2/final ] && return 0
  retry_start
  if [ ! -d $N/sft/final ]; then
    [ -f $N/positions.jsonl ] || toolgym synth tictactoe "${FT[@]}" --teacher-arg free_list=true -a task=move \
      -a split=train -n 0 -o $N/positions.jsonl
    [ -f $N/games.jsonl ] || toolgym synth tictactoe "${FT[@]}" --teacher-arg free_list=true \
      --teacher-arg invalid_prob=0.3 --teacher-arg invalid_last_prob=0.5 -a min_random_move_prob=0 \
      -a max_random_move_prob=1 -a num_groups=4 -n 1500 --seed 1 --drop-if heldout_visits --failed-turns context \
      -o $N/games.jsonl
    python $X/late_data.py $N/positions.jsonl $N/late.jsonl $N/games.jsonl
    timed forced-late-sft long toolgym sft $X/late_sft.toml -s output_dir=$N/sft -d $N/late.jsonl --resume
  fi
  # a second epoch (from the first's weights, another shuffle): after one, the free list was right in 62 % of
  # early and 40 % of late random cells
  timed forced-late-sft2 long toolgym sft $X/late_sft.toml -s model=$N/sft/final -s output_dir=$N/sft2 -s seed=1 \
    -d $N/late.jsonl --resume
}

# RL arms from the forced start (forced-arms, forced-trappy): each a forced_grpo.toml run with its own schedule, a branch
# being a copy of another arm's checkpoint at a step, resumed with another task_schedule (a resume need not match it)
FA=$R/forced
E='"position_share": 0, "split": "all", "kinds": "all"'  # a phase of whole games from the empty board only
p() { echo "{\"from_step\": $1, \"env_args\": {\"min_random_move_prob\": 0, \"max_random_move_prob\": $2${3:+, $3}}}"; }
MIX=(-s env_args.position_share=0.5 -s env_args.split=train -s env_args.kinds=quiet -s eval_env_args.position_share=0
     -s eval_env_args.split=all -s eval_env_args.kinds=all -s max_steps=80)
# decisive-more's restarts (twelfth round), the base of the thirteenth to fifteenth rounds' arms: three quarters of each
# batch restarted from lost games' last unforced boards against the optimal opponent, replayed, invalid moves forfeiting
MORE=(-s task_schedule=[] -s restart_share=0.75 -s env_args.restart_replay=0.75 -s env_args.restart_invalid_move=forfeit
      -s env_args.restart_board=last_unforced -s env_args.restart_opponent=optimal)
arm() {  # arm NAME [toolgym train -s ...]: one arm from the forced start, then its evals and where it lost
  timed forced-$1 long toolgym train $X/forced_grpo.toml "${MIX[@]}" -s output_dir=$FA/$1 "${@:2}" --resume
  rl_evals forced-$1 $FA/$1/final 2718
  python $X/losses.py $R/eval/forced-$1-games200-optimal
}
kl01_arm() {  # kl01_arm NAME [-s ...]: the thirteenth round's kl01 recipe (decisive-sym-kl01) from the late start with
  # the given changes; its final/ (and final_live/, with an average) on both test seeds, where it lost, its decisions
  local N=$R/forced-late
  timed forced-$1 long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$1 "${MORE[@]}" \
    -s env_args.restart_symmetry=true -s kl_coef=0.01 "${@:2}" --resume
  rl_evals forced-$1 $N/$1/final 2718
  python $X/losses.py $R/eval/forced-$1-games200-optimal
  optimal200 forced-$1-games200b-optimal $N/$1/final 1618
  for s in 2718:games200 1618:games200b; do
    if [ -d $N/$1/final_live ]; then optimal200 "forced-$1-live-${s#*:}-optimal" $N/$1/final_live "${s%%:*}"; fi
  done
  python $X/decisions.py $N/$1 --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20
}
from60() {  # from60 SRC DST: DST continues run SRC from its step-60 checkpoint (that checkpoint, config, rollouts
  # and metrics up to step 60 copied; then --resume with a larger max_steps), once
  [ -d $2/checkpoints ] && return 0
  mkdir -p $2/checkpoints
  cp -r $1/checkpoints/step_000060 $2/checkpoints/
  cp $1/config.json $1/rollouts.jsonl.gz $2/
  python -c "import json,sys; sys.stdout.writelines(l for l in open('$1/metrics.jsonl') if json.loads(l)['step'] <= 60)" > $2/metrics.jsonl
}
avg_optimal() {  # avg_optimal RUN_DIR STEPS: the run's checkpoints at STEPS (e.g. 40,50,60) averaged into
  # RUN_DIR/avgA-B, then 200 greedy games vs the optimal opponent on each test seed -> eval/forced-ARM-avg-games200(b)
  local avg=avg${2%%,*}-${2##*,} a; a=$(basename $1)
  [ -f $1/$avg/model.safetensors ] || toolgym model average $1 --steps $2 -o $1/$avg
  for s in 2718:games200 1618:games200b; do
    optimal200 "forced-$a-avg-${s#*:}-optimal" $1/$avg "${s%%:*}"
  done
}
branch() {  # branch NAME FROM STEP SCHEDULE_JSON [-s ...]: NAME continues FROM's checkpoint at STEP with SCHEDULE
  local c; c=$(printf "step_%06d" "$3")
  mkdir -p $FA/$1/checkpoints
  [ -d $FA/$1/checkpoints/$c ] || { cp -r $FA/$2/checkpoints/$c $FA/$1/checkpoints/; cp $FA/$2/config.json $FA/$1/
    python - $FA/$2 $FA/$1 "$3" <<'PY'
import gzip, json, sys
src, dst, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, op in (("metrics.jsonl", open), ("rollouts.jsonl.gz", gzip.open)):  # the source's records up to STEP
    with op(f"{src}/{name}", "rt") as f, op(f"{dst}/{name}", "wt") as g:
        g.writelines(line for line in f if line.strip() and json.loads(line)["step"] <= step)
PY
  }
  arm "$1" -s "task_schedule=$4" "${@:5}"
}
