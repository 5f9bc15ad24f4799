#!/usr/bin/env bash
# Tic-tac-toe recipe on CPU with the tiny offline model. Run from the repository root, one phase at a time:
#   bash examples/tictactoe/run.sh PHASE      PHASE: synth init sft focus grpo evals | budget rl weak noisy reader nothink | forced forced-start forced-late-start forced-late-build forced-arms forced-trappy forced-restart forced-retry forced-late forced-replay forced-optimal forced-decisive forced-anneal forced-shuffled forced-ema forced-pick forced-slow forced-block forced-temp forced-opt forced-sym forced-sym3 forced-probe forced-sym-soup forced-summary forced-exact forced-best-summary forced-frontier forced-default | table
# Main line (the committed default model): synth -> init -> sft -> focus (-> grpo: measured, not better).
#   synth   teacher data: one move on every training position (3,583; the 937 held-out never appear) + teacher games
#           from the empty board that never pass through a held-out position + draws of a teacher that opens anywhere
#           (the only source of five-move games that avoid held-out positions)
#   init    the tiny model (SIZE=small, 0.9M params) with a tokenizer trained on the teacher text
#   sft     SFT on all of it (sft.toml), then evals
#   focus   one SFT epoch re-weighted toward quiet positions and long games (focus_data.py, focus.toml), then evals
#   grpo    GRPO on one-move quiet/free tasks from the training positions (grpo.toml), then evals
#   evals   every position (4,520, held-out reported apart) + 200 games vs the random and the optimal opponent
# The RL story at CPU scale (budget.toml, grpo_budget.toml):
#   budget  SFT learning curve over teacher budgets BUDGETS="200 500 1000" training positions, held-out evals
#   rl      GRPO from the 200-position start with each of LOSSES="cispo grpo dr_grpo" (same budget), evals
#   weak    a weak start (SFT on 1,000 positions + 200 games, 300 steps: weak_sft.toml), then GRPO at temperature
#           0.5 with each of LOSSES="cispo grpo dr_grpo" (weak_grpo.toml), held-out evals and 200 games per opponent
#   noisy   a start that reads the board but imitates a noisy teacher (scripted:imperfect, 60 % random free cells:
#           noisy_sft.toml), then GRPO per loss (noisy_grpo.toml), held-out evals and 200 games per opponent
#   reader  the same at mistake_prob 1.0: a start that reads the board but never plays a reasoned move
#           (reader_sft.toml), then GRPO per loss (reader_grpo.toml), held-out evals and 200 games per opponent
#   nothink the same story without a think text (teacher think=none: "I play N."): SFT on 200 / 1,000 positions +
#           200 games (nothink_sft.toml), GRPO from the 200 start (nothink_grpo.toml), held-out evals
# RL on full games (issue 32: the seed's curve at CPU scale; forced_sft.toml, forced_grpo.toml):
#   forced  a start that takes wins and blocks but plays every other move at random (scripted:imperfect,
#           mistakes=quiet), then GRPO on whole games vs the minimax opponent annealed from random to optimal with
#           each of LOSSES="cispo grpo dr_grpo", 200 games per opponent on seed 2718, quiet positions split by
#           whether the RL games visited them (discovery.py), the curve (forced_curve.py)
#   forced-start  instead of forced's SFT: the committed start (examples/tictactoe/forced_start) copied where it goes
#   forced-late-start  instead of building forced-late's start: the committed one (examples/tictactoe/late_start)
#   forced-late-build  only that late start, from scratch (the retry start, then two epochs), and its evals
#   forced-arms  after forced: games from quiet training positions mixed in (position_share), other opponent schedules
#           and branches of one run (fifth round of the docs), each with evals and where its games were lost (losses.py)
#   forced-trappy  after forced-arms: branches against the trappy opponent (minimax moves that set traps), one with
#           invalid moves forfeiting the game (sixth round of the docs), evals also against the trappy opponent
#   forced-restart  after forced: half of each step's groups restart from boards of the previous step's lost games
#           (restart_share), against the same run without restarts (seventh round of the docs)
#   forced-retry  the forced start rebuilt with teacher games that show a retry after an invalid move (the invalid
#           turn out of the loss), then the wide schedule from it, without and with restarts (eighth round of the docs)
#   forced-late  after forced-retry: its start continued one SFT epoch on the same teacher naming the free cells before a
#           random cell, with late boards weighted (late_data.py), then restarts, without and with games from quiet
#           3-mark positions (ninth round of the docs)
#   forced-replay  after forced-late: its late-restart arm with half of the restarted groups replayed from a buffer of
#           contested boards (restart_replay: Prioritized Level Replay for boards; tenth round of the docs)
#   forced-optimal  after forced-late: forced-replay's arm with the restarted games played against the optimal opponent
#           (restart_opponent = optimal; eleventh round of the docs)
#   forced-decisive  after forced-late: restarts where an invalid move forfeits, from a lost game's last unforced board,
#           against the optimal opponent and against the game's (twelfth round of the docs)
#   forced-anneal  after forced-late: forced-decisive's decisive-more arm with one change each -- its whole games'
#           opponent annealed to optimal, restart boards turned by a random symmetry, a weaker or no KL anchor, games
#           from three-mark boards, the trappy opponent -- then the start's and one arm's sampled moves on the quiet
#           three-mark boards (thirteenth round of the docs)
#   forced-shuffled  forced-late's start rebuilt with the free-cell lists in a random order, then forced-anneal's kl01 arm
#           (three seeds), the same at kl_coef 0.05 and with the policy gradient on every token (fourteenth round)
#   forced-ema  forced-anneal's kl01 arm with a moving average of its weights kept during GRPO, and with twice the
#           groups per step (fifteenth round)
#   forced-pick  a checkpoint of the kl01 runs picked on 400 validation games (fifteenth round)
#   forced-slow  the kl01 arm at half the learning rate, decayed, over twice the steps or with twice the groups
#           (sixteenth round)
#   forced-block  forced-slow's batch16 arm with the non-restarted games' opponent annealed to optimal, so that an
#           attack instead of a block stops paying (seventeenth round)
#   forced-temp  forced-anneal's kl01 arm from the committed late start with its games sampled at temperature 1.0,
#           beside the same at 0.7, two seeds each (eighteenth round)
#   forced-opt  forced-temp's temperature-1.0 arm with the non-restarted games against the optimal opponent from step
#           1 (no weak opponent to teach attacks instead of blocks), seeds 0 and 1 (nineteenth round)
#   forced-sym  forced-opt's arm with every trained game also trained in one rotated or mirrored image
#           (symmetry_images = 1), seeds 0, 1 and 2, beside a third seed of the arm without images (twentieth
#           round)
#   forced-sym3  the same arm with three images per game (symmetry_images = 3), seeds 0-4 (twenty-first round)
#   forced-probe  forced-sym3's arm with 16 greedy probe games a step whose lost games are restarted first
#           (probe_games = 16), seeds 0, 1 and 2 (twenty-second round)
#   forced-sym-soup  the three seeds' averaged models averaged into one, on the test games and a fresh seed
#   forced-summary  after forced-sym3: the late start on the same seeds as its five models, every quiet position for
#           the start and each model, discovery.py per run and pooled (docs: "where it stands")
#   forced-exact  after forced-sym3: two more seeds of its arm with the periodic eval exact every 5 steps (eval_exact)
#           (ARMS=t10-opt-kl01-sym3-best-seedN: and back to the best weights by the exact eval, revert_to_best;
#           ARMS=t10-mix05-kl01-sym3-keep-seedN: the best kept, the games not restarted against weaker opponents;
#           ARMS=t10-opt-kl01-sym3-keep100-seedN: the best kept over 100 steps;
#           ARMS=t10-mix05-kl01-sym3-keep100-seedN: both, the weaker opponents and the 100 steps;
#           ARMS=t10-mix05-d08-kl01-sym3-keep100-seedN: that, a draw worth 0.8 instead of 0.5)
#   forced-best-summary  after the best arms of forced-exact: fresh-seed games, quiet positions, discovery, curves,
#           each kept model through toolgym serve (served_exact.py), where the wins vs random are lost
#           (win_shortfall.py); BEST=t10-mix05-kl01-sym3-keep (or
#           t10-opt-kl01-sym3-keep100, with PNG=forced_keep100.png) for that arm
#   forced-frontier  after forced-exact: each checkpoint under 5 % exact losses walked against random play too,
#           and frontier.py: which weights along the runs meet both game targets (BEST="ARM ARM ...", PNG=...)
#   forced-late-patch  after forced-exact: a short GRPO phase from an arm's kept weights on late boards asked alone
#           (as toolgym serve asks them) and whole games (late_patch.toml), then both weights in their own games and
#           served (ARMS=..., PATCH=move: the one-move variant; twenty-ninth round)
#   forced-default  the same RL from the committed default model (envs/tictactoe/toolgym_tictactoe/checkpoint),
#           then every position and 200 games per opponent on two fresh seeds, beside the default itself
#   table   the results tables (results_table.py)
set -euo pipefail
source examples/tictactoe/lib.sh  # variables and helpers (run from the repository root)
mkdir -p $R
case "${1:-}" in
  synth)
    timed synth-positions toolgym synth tictactoe "${TEACH[@]}" -a transport=inprocess -a task=move -a split=train \
      -n 0 -o $R/teacher_positions.jsonl
    timed synth-games toolgym synth tictactoe "${TEACH[@]}" -a transport=inprocess -a min_random_move_prob=0 \
      -a max_random_move_prob=1 -a num_groups=4 -n "${GAMES:-1500}" --drop-if heldout_visits --drop-if loss \
      --require-valid -o $R/teacher_games.jsonl
    timed synth-draws toolgym synth tictactoe --teacher scripted:minimax --teacher-arg think=track \
      --teacher-arg tie_break=random -a transport=inprocess -a min_random_move_prob=0 -a max_random_move_prob=0.3 \
      -a num_groups=4 -n 4000 --seed 5 --drop-if heldout_visits --drop-if loss --drop-if win --require-valid \
      -o $R/teacher_draws.jsonl ;;
  init)
    toolgym model init-tiny --out $R/tiny --size "$SIZE" --corpus-file $R/teacher_positions.jsonl \
      --corpus-file $R/teacher_games.jsonl ;;
  sft)
    timed sft toolgym sft $X/sft.toml
    positions sft $R/sft/final all && games sft $R/sft/final ;;
  focus)
    python $X/focus_data.py $R/teacher_positions.jsonl $R/teacher_games.jsonl $R/teacher_draws.jsonl $R/focus.jsonl
    timed focus toolgym sft $X/focus.toml
    positions focus $R/focus/final all && games focus $R/focus/final ;;
  grpo)
    timed grpo toolgym train $X/grpo.toml
    positions grpo $R/grpo/final all && games grpo $R/grpo/final ;;
  evals)
    for m in "${@:2}"; do positions "$(basename "$(dirname "$m")")" "$m" all; games "$(basename "$(dirname "$m")")" "$m"; done ;;
  budget)
    for n in ${BUDGETS:-200 500 1000}; do
      toolgym synth tictactoe "${TEACH[@]}" -a transport=inprocess -a task=move -a split=train -n "$n" \
        -o $R/budget/teacher-$n.jsonl
      timed sft-$n toolgym sft $X/budget.toml -d $R/budget/teacher-$n.jsonl -o $R/budget/sft-$n \
        -s epochs="$(python -c "print(${STEPS:-300} * 8 / $n)")"
      positions sft-$n $R/budget/sft-$n/final heldout
      if [ "$n" = 200 ]; then games sft-$n $R/budget/sft-$n/final; fi   # the RL start: games too
    done ;;
  rl)
    for loss in ${LOSSES:-cispo grpo dr_grpo}; do
      timed rl-$loss toolgym train $X/grpo_budget.toml -s loss_type=$loss -s output_dir=$R/rl/$loss
      positions rl-$loss $R/rl/$loss/final heldout && games rl-$loss $R/rl/$loss/final
    done ;;
  weak)
    W=$R/weak
    mkdir -p $W
    toolgym synth tictactoe "${TEACH[@]}" -a transport=inprocess -a task=move -a split=train -n 0 -o $W/positions.jsonl
    toolgym synth tictactoe "${TEACH[@]}" -a transport=inprocess -a task=move -a split=train -n 1000 \
      -o $W/positions-1000.jsonl
    toolgym synth tictactoe "${TEACH[@]}" -a transport=inprocess -a min_random_move_prob=0 -a max_random_move_prob=1 \
      -a num_groups=4 -n 400 --drop-if heldout_visits --drop-if loss --require-valid -o $W/games.jsonl
    head -200 $W/games.jsonl > $W/games-200.jsonl
    toolgym model init-tiny --out $W/tiny --size "$SIZE" --corpus-file $W/positions.jsonl --corpus-file $W/games.jsonl
    timed weak-sft toolgym sft $X/weak_sft.toml
    rl_evals weak-sft $W/sft/final 4242
    for loss in ${LOSSES:-cispo grpo dr_grpo}; do
      timed weak-$loss toolgym train $X/weak_grpo.toml -s loss_type=$loss -s output_dir=$W/$loss
      rl_evals weak-$loss $W/$loss/final 4242
    done ;;
  noisy|reader)
    # noisy: scripted:imperfect at mistake_prob 0.6; reader: at 1.0 (reads the board, plays a random free cell)
    N=$R/$1
    if [ "$1" = noisy ]; then MISTAKE=0.6; EVAL_SEED=9090; else MISTAKE=1.0; EVAL_SEED=31337; fi
    mkdir -p $N
    NT=(--teacher scripted:imperfect --teacher-arg mistake_prob=$MISTAKE --teacher-arg think=track
        --teacher-arg tie_break=exploit -a transport=inprocess)
    toolgym synth tictactoe "${NT[@]}" -a task=move -a split=train -n 0 -o $N/positions.jsonl
    toolgym synth tictactoe "${NT[@]}" -a min_random_move_prob=0 -a max_random_move_prob=1 -a num_groups=4 -n 300 \
      --drop-if heldout_visits --require-valid -o $N/games.jsonl
    toolgym model init-tiny --out $N/tiny --size "$SIZE" --corpus-file $N/positions.jsonl --corpus-file $N/games.jsonl
    timed $1-sft toolgym sft $X/$1_sft.toml
    rl_evals $1-sft $N/sft/final $EVAL_SEED
    for loss in ${LOSSES:-cispo grpo dr_grpo}; do
      timed $1-$loss toolgym train $X/$1_grpo.toml -s loss_type=$loss -s output_dir=$N/$loss
      rl_evals $1-$loss $N/$loss/final $EVAL_SEED
    done ;;
  nothink)
    N=$R/nothink
    MAXTOK=40   # the no-think turn is 33 tokens
    NT=(--teacher scripted:minimax --teacher-arg think=none --teacher-arg tie_break=exploit -a transport=inprocess)
    mkdir -p $N
    toolgym synth tictactoe "${NT[@]}" -a task=move -a split=train -n 0 -o $N/positions.jsonl
    toolgym synth tictactoe "${NT[@]}" -a min_random_move_prob=0 -a max_random_move_prob=1 -a num_groups=4 -n 400 \
      --drop-if heldout_visits --drop-if loss --require-valid -o $N/games.jsonl
    head -200 $N/games.jsonl > $N/games-200.jsonl
    toolgym model init-tiny --out $N/tiny --size "$SIZE" --corpus-file $N/positions.jsonl --corpus-file $N/games.jsonl
    for n in 200 1000; do
      toolgym synth tictactoe "${NT[@]}" -a task=move -a split=train -n $n -o $N/positions-$n.jsonl
      timed nothink-sft-$n toolgym sft $X/nothink_sft.toml -d $N/positions-$n.jsonl -d $N/games-200.jsonl \
        -o $N/sft-$n
      positions nothink-sft-$n $N/sft-$n/final heldout
    done
    timed nothink-grpo toolgym train $X/nothink_grpo.toml
    positions nothink-grpo $N/grpo/final heldout ;;
  forced-data)  # the teacher rows of the forced start (also used by gpu.sh nohub)
    N=$R/forced
    mkdir -p $N
    toolgym synth tictactoe "${FT[@]}" -a task=move -a split=train -n 0 -o $N/positions.jsonl
    toolgym synth tictactoe "${FT[@]}" -a min_random_move_prob=0 -a max_random_move_prob=1 -a num_groups=4 -n 600 \
      --drop-if heldout_visits --require-valid -o $N/games.jsonl ;;
  forced-start)  # the committed forced start (examples/tictactoe/forced_start, the SFT of `forced`) where the RL
    # phases look for it, instead of rebuilding it (25-45 min)
    mkdir -p $R/forced/sft
    [ -d $R/forced/sft/final ] || cp -r $X/forced_start $R/forced/sft/final ;;
  forced-late-start)  # the committed late start (examples/tictactoe/late_start, the second SFT epoch of forced-late)
    # where forced-late and the later rounds look for it, instead of rebuilding it (retry start + two epochs)
    mkdir -p $R/forced-late/sft2
    [ -d $R/forced-late/sft2/final ] || cp -r $X/late_start $R/forced-late/sft2/final ;;
  forced-late-build)  # only the late start, built from scratch (retry_start, late_start), and its evals: what
    # examples/tictactoe/late_start was made by
    N=$R/forced-late
    late_start
    rl_evals forced-late-sft $N/sft2/final 2718 && quiet forced-late-sft $N/sft2/final
    python $X/losses.py $R/eval/forced-late-sft-games200-optimal ;;
  forced)
    N=$R/forced
    bash $X/run.sh forced-data
    toolgym model init-tiny --out $N/tiny --size "$SIZE" --corpus-file $N/positions.jsonl --corpus-file $N/games.jsonl
    timed forced-sft long toolgym sft $X/forced_sft.toml
    rl_evals forced-sft $N/sft/final 2718 && quiet forced-sft $N/sft/final
    for loss in ${LOSSES:-cispo grpo dr_grpo}; do
      timed forced-$loss long toolgym train $X/forced_grpo.toml -s loss_type=$loss -s output_dir=$N/$loss
      rl_evals forced-$loss $N/$loss/final 2718 && quiet forced-$loss $N/$loss/final
      python $X/losses.py $R/eval/forced-$loss-games200-optimal
      python $X/discovery.py $N/$loss forced-sft=$R/eval/forced-sft-positions-quiet \
        forced-$loss=$R/eval/forced-$loss-positions-quiet --json $N/discovery-$loss.json
    done
    python $X/forced_curve.py $R $N/grpo $N/dr_grpo $N/cispo -o $X/forced_curves.png
    python $X/results_table.py $R forced-sft ${LOSSES:-forced-cispo forced-grpo forced-dr_grpo} ;;
  forced-arms|forced-trappy|forced-restart|forced-retry|forced-late|forced-replay|forced-optimal|forced-decisive|forced-anneal|forced-shuffled|forced-ema|forced-pick|forced-slow|forced-block|forced-temp|forced-opt|forced-sym|forced-sym3|forced-probe|forced-sym-soup|forced-summary|forced-exact|forced-best-summary|forced-frontier|forced-late-patch)  # the GRPO rounds, fifth to twenty-second, and their summary
    source $X/rounds.sh ;;
  forced-default)
    N=$R/forced-default
    D=envs/tictactoe/toolgym_tictactoe/checkpoint
    timed forced-default long toolgym train $X/forced_grpo.toml -s model=$D -s loss_type=grpo -s output_dir=$N/grpo
    for m in default:$D forced-default:$N/grpo/final; do
      name=${m%%:*}; dir=${m#*:}
      positions "$name" "$dir" all
      rl_evals "$name" "$dir" 2718
      for opp in random optimal; do
        if [ $opp = random ]; then p=1.0; else p=0.0; fi
        toolgym eval tictactoe -m "hf:$dir" -n 200 -c 64 -t 0 --max-tokens $MAXTOK --seed 1618 -a transport=inprocess \
          -a min_random_move_prob=$p -a max_random_move_prob=$p -o "$R/eval/$name-games200b-$opp" --resume
      done
      quiet "$name" "$dir"
    done
    python $X/results_table.py $R default forced-default ;;
  table)
    python $X/results_table.py $R ;;
  *) echo "usage: run.sh synth|init|sft|focus|grpo|evals MODEL_DIR...|budget|rl|weak|noisy|reader|nothink|forced|forced-start|forced-late-start|forced-late-build|forced-arms|forced-trappy|forced-restart|forced-retry|forced-late|forced-replay|forced-optimal|forced-decisive|forced-anneal|forced-shuffled|forced-ema|forced-pick|forced-slow|forced-block|forced-temp|forced-opt|forced-sym|forced-sym3|forced-probe|forced-sym-soup|forced-summary|forced-exact|forced-best-summary|forced-frontier|forced-late-patch|forced-default|table"; exit 2 ;;
esac
