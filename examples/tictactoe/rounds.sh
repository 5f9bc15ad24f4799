# The GRPO rounds five to twenty-two of run.sh (sourced by it with the phase as $1, after lib.sh; not run on its
# own): one case per round, in the order of docs/training/tictactoe-recipe.md.
case "$1" in
  forced-arms)  # fifth round (docs: "Fifth round"): forced_grpo.toml with games from quiet training positions mixed
    # in (position_share), other opponent schedules, and branches of one run at step 20 (its checkpoint copied into a
    # new run folder, resumed with another task_schedule: a resume need not match the schedule); after `forced`
    N=$FA
    arm mixed -s "task_schedule=[$(p 0 1.0), $(p 10 0.5), $(p 25 0.2)]"
    arm mixed-t05 -s "task_schedule=[$(p 0 1.0), $(p 10 0.5), $(p 25 0.2)]" -s temperature=0.5
    arm mixed-low -s "task_schedule=[$(p 0 0.3)]"
    arm mixed-after20 -s "task_schedule=[$(p 0 1.0 "$E"), $(p 20 0.5), $(p 40 0.2)]"
    branch mixed-strong mixed-after20 20 "[$(p 0 1.0 "$E"), $(p 20 0.2)]"
    branch strong mixed-after20 20 "[$(p 0 1.0 "$E"), $(p 20 0.1 "$E")]"
    branch mixed-wide mixed-after20 20 "[$(p 0 1.0 "$E"), $(p 20 1.0)]" -s max_steps=60
    branch wide mixed-after20 20 "[$(p 0 1.0 "$E"), $(p 20 1.0 "$E")]" -s max_steps=60
    branch wide-strong wide 40 "[$(p 0 1.0 "$E"), $(p 20 1.0 "$E"), $(p 40 0.2 "$E")]" -s max_steps=60
    python $X/forced_curve.py $R grpo=$N/grpo mixed=$N/mixed mixed-after20=$N/mixed-after20 strong=$N/strong \
      mixed-wide=$N/mixed-wide wide=$N/wide wide-strong=$N/wide-strong -o $X/forced_arms.png ;;
  forced-trappy)  # sixth round (docs: "Sixth round"): the wide arm's branch against the trappy opponent (among its
    # best moves, those that leave a quiet position with a losing move), over the whole random-move range, the lower
    # half, and the whole range with invalid moves forfeiting the game; evals also against the trappy optimal opponent, and the fifth round's wide arm beside them. After
    # forced-arms. ARMS picks some: two side by side with ARMS=trappy-wide LOCK=/tmp/a and ARMS="trappy-half wide"
    # LOCK=/tmp/b (each run uses one thread)
    T='"opponent_style": "trappy"'
    F='"invalid_move": "forfeit"'  # an invalid move ends the game (a loss), as it does a greedy player's
    for a in ${ARMS:-trappy-wide trappy-half trappy-forfeit wide}; do
      case $a in
        trappy-wide) branch trappy-wide mixed-after20 20 "[$(p 0 1.0 "$E"), $(p 20 1.0 "$E, $T")]" -s max_steps=60 ;;
        trappy-half) branch trappy-half mixed-after20 20 "[$(p 0 1.0 "$E"), $(p 20 0.5 "$E, $T")]" -s max_steps=60 ;;
        trappy-forfeit) branch trappy-forfeit mixed-after20 20 "[$(p 0 1.0 "$E"), $(p 20 1.0 "$E, $T, $F")]" \
          -s max_steps=60 ;;
      esac
    done
    for a in ${ARMS:-trappy-wide trappy-half trappy-forfeit wide}; do
      toolgym eval tictactoe -m "hf:$FA/$a/final" -n 200 -c 64 -t 0 --max-tokens $MAXTOK --seed 2718 -a transport=inprocess \
        -a min_random_move_prob=0 -a max_random_move_prob=0 -a opponent_style=trappy -o "$R/eval/forced-$a-games200-trappy" --resume
      python $X/losses.py $R/eval/forced-$a-games200-trappy
    done
    python $X/forced_curve.py $R wide=$FA/wide trappy-wide=$FA/trappy-wide trappy-half=$FA/trappy-half \
      trappy-forfeit=$FA/trappy-forfeit -o $X/forced_trappy.png ;;
  forced-restart)  # seventh round (docs: "Seventh round"): a share of each step's groups restarts from boards that
    # the previous step's lost games showed (restart_share, per-decision credit); 60 steps from the forced start over
    # the whole random-move range from the empty board (the fifth round's wide arm is the control: the same without
    # restarts). restart-forfeit / forfeit-only: the first try, invalid moves forfeiting the game in training (not in
    # the evals), stopped at steps 43 / 32. opening / opening25: restarts only from boards of at most 3 marks
    # (restart_max_pieces), share 0.5 / 0.25. After forced or forced-start. ARMS picks some: side by side with
    # ARMS=restart LOCK=/tmp/a and ARMS=restart75 LOCK=/tmp/b (each run uses one thread)
    RS=(-s task_schedule=[] -s eval_env_args.invalid_move=retry)
    F=(-s env_args.invalid_move=forfeit)
    for a in ${ARMS:-restart restart75}; do
      case $a in
        restart) S=(-s restart_share=0.5) ;;
        restart75) S=(-s restart_share=0.75) ;;
        opening) S=(-s restart_share=0.5 -s env_args.restart_max_pieces=3) ;;
        opening25) S=(-s restart_share=0.25 -s env_args.restart_max_pieces=3) ;;
        restart-forfeit) S=(-s restart_share=0.5 "${F[@]}") ;;
        forfeit-only) S=("${F[@]}") ;;
      esac
      timed forced-$a long toolgym train $X/forced_grpo.toml -s output_dir=$FA/$a "${RS[@]}" "${S[@]}" --resume
      rl_evals forced-$a $FA/$a/final 2718
      python $X/losses.py $R/eval/forced-$a-games200-optimal
    done
    python $X/forced_curve.py $R restart=$FA/restart restart75=$FA/restart75 opening=$FA/opening opening25=$FA/opening25 \
      restart-forfeit=$FA/restart-forfeit \
      forfeit-only=$FA/forfeit-only -o $X/forced_restart.png ;;
  forced-retry)  # eighth round (docs: "Eighth round"): the forced start rebuilt with games in which the teacher
    # first calls an occupied cell on 30 % of its moves, reads the error and plays its move (the invalid turn is
    # context, out of the loss: --failed-turns context); the same positions, steps and SFT config as `forced`. Then
    # the wide schedule (0-1 from the empty board) from it, without and with restarts (that arm then resumed to 90
    # steps and evaluated again). ARMS picks some: side by side
    # with ARMS=retry-wide LOCK=/tmp/a and ARMS=retry-restart LOCK=/tmp/b (after the SFT)
    N=$R/forced-retry
    retry_start
    rl_evals forced-retry-sft $N/sft/final 2718 && quiet forced-retry-sft $N/sft/final
    python $X/losses.py $R/eval/forced-retry-sft-games200-optimal
    for a in ${ARMS:-retry-wide retry-restart}; do
      case $a in
        retry-wide) S=() ;;
        retry-restart) S=(-s restart_share=0.5) ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      timed forced-$a long toolgym train $X/forced_grpo.toml -s model=$N/sft/final -s output_dir=$N/$a \
        -s task_schedule=[] "${S[@]}" --resume
      rl_evals forced-$a $N/$a/final 2718
      python $X/losses.py $R/eval/forced-$a-games200-optimal
      if [ $a = retry-restart ]; then   # its curve was still falling at 60: 30 more steps (a resume), evaluated again
        timed forced-$a-90 long toolgym train $X/forced_grpo.toml -s model=$N/sft/final -s output_dir=$N/$a \
          -s task_schedule=[] "${S[@]}" -s max_steps=90 --resume
        rl_evals forced-${a}90 $N/$a/final 2718
        python $X/losses.py $R/eval/forced-${a}90-games200-optimal
      fi
    done
    for ck in retry-wide:10 retry-restart:70; do   # the best periodic-eval checkpoints, on the same 200 test games
      a=${ck%%:*}; n=${ck##*:}; M=$N/$a/checkpoints/step_$(printf %06d $n)/model
      if [ -d $M ]; then
        rl_evals forced-$a-s$n $M 2718
        python $X/losses.py $R/eval/forced-$a-s$n-games200-optimal
      fi
    done
    python $X/forced_curve.py $R retry-wide=$N/retry-wide retry-restart=$N/retry-restart \
      --start forced-retry-sft-games200-optimal -o $X/forced_retry.png ;;
  forced-late)  # ninth round (docs: "Ninth round"): the retry start continued for two SFT epochs on data of the same
    # teacher whose random cells first list the free cells (free_list=true): new games with a retry on 30 % of moves
    # and half of the one-cell boards, every training position with one or two free cells twice, every other once
    # (late_data.py, late_sft.toml); then restarts (late-restart: as the eighth round's retry-restart) and the same
    # with half of the new games from quiet 3-mark training positions (late-traps: the opponent's second move), and
    # late-opening (run after the other two, alone on 2 threads): restarts kept to boards of at most 3 marks and three
    # quarters of the new games from those positions. Each
    # arm is evaluated at step 60 and at its best periodic-eval checkpoint (fewest losses on the periodic eval's own
    # seeds, never the test seed); late-traps is then resumed to 90 steps. ARMS picks some: side by side with
    # ARMS=late-restart LOCK=/tmp/a and ARMS=late-traps LOCK=/tmp/b (after the SFT); the analyses and the plot at the
    # end run once both arms are there
    N=$R/forced-late
    late_start
    rl_evals forced-late-sft $N/sft2/final 2718 && quiet forced-late-sft $N/sft2/final
    python $X/losses.py $R/eval/forced-late-sft-games200-optimal
    for a in ${ARMS:-late-restart late-traps late-opening}; do
      case $a in
        late-restart) S=(-s restart_share=0.5) ;;
        late-opening) S=(-s restart_share=0.5 -s env_args.restart_max_pieces=3 -s env_args.position_share=0.75
                         -s env_args.split=train -s env_args.kinds=quiet -s "env_args.position_pieces=[3]"
                         -s eval_env_args.position_share=0 -s eval_env_args.split=all -s eval_env_args.kinds=all
                         -s eval_env_args.position_pieces=null -s num_threads=2) ;;
        late-traps) S=(-s restart_share=0.5 -s env_args.position_share=0.5 -s env_args.split=train
                       -s env_args.kinds=quiet -s "env_args.position_pieces=[3]" -s eval_env_args.position_share=0
                       -s eval_env_args.split=all -s eval_env_args.kinds=all -s eval_env_args.position_pieces=null) ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      timed forced-$a long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a \
        -s task_schedule=[] "${S[@]}" --resume
      arm_evals $a $N/$a
      if [ $a = late-traps ]; then   # its periodic eval was at its lowest at 60: 30 more steps (a resume), evaluated
        timed forced-$a-90 long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a \
          -s task_schedule=[] "${S[@]}" -s max_steps=90 --resume
        rl_evals forced-${a}90 $N/$a/final 2718
        python $X/losses.py $R/eval/forced-${a}90-games200-optimal
      fi
    done
    [ -d $N/late-restart/final ] && [ -d $N/late-traps/final ] && [ -d $N/late-opening/final ] || exit 0
    for a in late-restart late-traps late-opening; do   # sampled moves at the three trap classes, per 20 steps
      python $X/decisions.py $N/$a --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20
    done
    quiet forced-late-traps $N/late-traps/checkpoints/step_000060/model
    python $X/discovery.py $N/late-traps start=$R/eval/forced-late-sft-positions-quiet \
      late-traps=$R/eval/forced-late-traps-positions-quiet
    python $X/forced_curve.py $R late-restart=$N/late-restart late-traps=$N/late-traps late-opening=$N/late-opening \
      --start forced-late-sft-games200-optimal -o $X/forced_late.png ;;
  forced-replay)  # tenth round (docs: "Tenth round"): late-restart (restart_share 0.5 from the late start) with half of
    # the restarted groups replayed from a buffer of contested boards (restart_replay = 0.5, PLR's replay rate; the
    # buffer's defaults: 64 boards, rank temperature 0.3, staleness 0.3, scored by the spread of a group's losses);
    # evaluated at step 60 and at its best periodic-eval checkpoint, resumed to 90 and evaluated again; then which
    # boards the restarts started from (steps 1-60)
    N=$R/forced-late
    a=late-replay
    [ -d $N/sft2/final ] || { echo "forced-replay continues run.sh forced-late's start: run that first"; exit 2; }
    timed forced-$a long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a \
      -s task_schedule=[] -s restart_share=0.5 -s env_args.restart_replay=0.5 --resume
    arm_evals $a $N/$a
    # its periodic eval was still falling at 60 (19 -> 10 %): 30 more steps (a resume: the buffer starts empty),
    # evaluated at 90
    timed forced-$a-90 long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a \
      -s task_schedule=[] -s restart_share=0.5 -s env_args.restart_replay=0.5 -s max_steps=90 --resume
    rl_evals forced-${a}90 $N/$a/final 2718
    python $X/losses.py $R/eval/forced-${a}90-games200-optimal
    for b in late-restart $a; do   # restarted groups at the three trap classes; sampled moves there, per 20 steps
      [ -d $N/$b ] || continue
      python $X/restarts.py $N/$b --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20 --max-step 60
      python $X/decisions.py $N/$b --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20
    done
    python $X/forced_curve.py $R late-restart=$N/late-restart late-traps=$N/late-traps late-replay=$N/$a \
      --start forced-late-sft-games200-optimal -o $X/forced_replay.png ;;
  forced-optimal)  # eleventh round (docs: "Eleventh round"): forced-replay's late-replay arm with the restarted games
    # played against the optimal opponent (restart_opponent = optimal: the lost game's board, its opponent at
    # random-move probability 0), so a restarted group is contested exactly where one reply keeps the draw; evaluated at
    # step 60 and at its best periodic-eval checkpoint; then which boards the restarts started from (steps 1-60)
    N=$R/forced-late
    a=late-optimal
    [ -d $N/sft2/final ] || { echo "forced-optimal continues run.sh forced-late's start: run that first"; exit 2; }
    timed forced-$a long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a \
      -s task_schedule=[] -s restart_share=0.5 -s env_args.restart_replay=0.5 -s env_args.restart_opponent=optimal \
      --resume
    arm_evals $a $N/$a
    python $X/restarts.py $N/$a --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20 --max-step 60
    python $X/decisions.py $N/$a --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20
    C=(late-optimal=$N/$a); [ -d $N/late-replay ] && C=(late-replay=$N/late-replay "${C[@]}")
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/forced_optimal.png ;;
  forced-decisive)  # twelfth round (docs: "Twelfth round"): the eleventh round's next step -- restarted games where an
    # invalid move forfeits (restart_invalid_move = forfeit) and a lost game restarting from its last unforced board
    # (restart_board = last_unforced: no win to take, no threat to block -- where a game lost to a fork was decided);
    # late-decisive: late-optimal + both, decisive-game: late-replay + both (restarts against the game's opponent);
    # then, since late-decisive's periodic eval swung (3 % at step 30, 16 % at 60) with its invalid calls:
    # decisive-cosine (late-decisive with the learning rate decayed to 0 over the 60 steps) and decisive-forfeit (the
    # same with an invalid move forfeiting every training game, not only restarted ones; the evals keep retry);
    # then decisive-seed1 (late-decisive with another seed: how far its result is the run's luck) and decisive-more
    # (late-decisive with three quarters of the groups restarted and three quarters of those replayed); then
    # decisive-seed2 and decisive-seed3 (late-decisive with seeds 2 and 3).
    # Each evaluated at step 60 and at its best periodic-eval checkpoint; then which boards the restarts started from;
    # late-decisive's kind (its seeds and decisive-more) also at that checkpoint on a second test seed (1618).
    # ARMS picks some: side by side with ARMS=late-decisive LOCK=/tmp/a and ARMS=decisive-game LOCK=/tmp/b
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-decisive continues run.sh forced-late's start: run that first"; exit 2; }
    D=(-s task_schedule=[] -s restart_share=0.5 -s env_args.restart_replay=0.5 -s env_args.restart_invalid_move=forfeit
       -s env_args.restart_board=last_unforced)
    A=(late-decisive decisive-game decisive-cosine decisive-forfeit decisive-seed1 decisive-more decisive-seed2
       decisive-seed3)
    for a in ${ARMS:-${A[*]}}; do
      case $a in
        late-decisive) S=(-s env_args.restart_opponent=optimal) ;;
        decisive-game) S=() ;;
        decisive-cosine) S=(-s env_args.restart_opponent=optimal -s lr_schedule=cosine) ;;
        decisive-forfeit) S=(-s env_args.restart_opponent=optimal -s lr_schedule=cosine -s env_args.invalid_move=forfeit
                             -s eval_env_args.invalid_move=retry) ;;
        decisive-seed[123]) S=(-s env_args.restart_opponent=optimal -s seed=${a#decisive-seed}) ;;
        decisive-more) S=(-s env_args.restart_opponent=optimal -s restart_share=0.75 -s env_args.restart_replay=0.75) ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      timed forced-$a long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a "${D[@]}" \
        "${S[@]}" --resume
      arm_evals $a $N/$a
      python $X/restarts.py $N/$a --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20 --max-step 60
      python $X/decisions.py $N/$a --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20
      case $a in decisive-game|decisive-cosine|decisive-forfeit) continue ;; esac
      # late-decisive's kind: its best checkpoint's 200 games vs the optimal opponent again on a second fresh seed
      n=$(python $X/best_step.py $N/$a/metrics.jsonl)
      optimal200 forced-$a-best-games200b-optimal $N/$a/checkpoints/step_$(printf %06d $n)/model 1618
      if [ $a = decisive-more ]; then   # the steadiest arm: 30 more steps (a resume: the buffer starts empty)
        timed forced-$a-90 long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a \
          "${D[@]}" "${S[@]}" -s max_steps=90 --resume
        rl_evals forced-decisive-more90 $N/$a/final 2718
        python $X/losses.py $R/eval/forced-decisive-more90-games200-optimal
      fi
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    C=(); for a in "${A[@]}"; do C+=("$a=$N/$a"); done
    [ -d $N/late-optimal ] && C=(late-optimal=$N/late-optimal "${C[@]}")
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/forced_decisive.png ;;
  forced-anneal)  # thirteenth round (docs: "Thirteenth round"): the twelfth round's next steps on decisive-more
    # (three quarters of the groups restarted from decisive boards vs the optimal opponent, invalid moves forfeiting):
    # decisive-anneal (the whole games' opponent annealed to optimal -- random-move probability up to 1 / 0.5 / 0 from
    # steps 0 / 20 / 40 -- instead of 0-1 throughout) and decisive-sym (each restart board turned into a random one of
    # its 8 rotations and reflections: decisive-more's test losses were at the traps in orientations its sampled moves
    # met less often); then decisive-sym with seed 1, and with a fifth of the KL anchor (kl_coef 0.01: the anchor is the
    # start, whose quiet moves are uniform, so it pulls every trap decision back toward chance); then with no anchor
    # (kl0), and kl01 with half of its whole games started from quiet training boards of the opponent's second move,
    # where the traps are (kl01-traps, as the ninth round's late-traps); then kl01 with seeds 1 and 2, and kl01 with
    # the trappy opponent in its training games (its minimax moves leave the traps; the evals stay uniform, so the
    # opposite-corners trap, the rarest board in training, is met more often). Each evaluated like the twelfth
    # round's arms, then its best checkpoint and its step-60 model also on a second fresh seed (1618).
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-anneal continues run.sh forced-late's start: run that first"; exit 2; }
    D=("${MORE[@]}")
    A=(decisive-anneal decisive-sym decisive-sym-seed1 decisive-sym-kl01 decisive-sym-kl0 decisive-sym-kl01-traps
       decisive-sym-kl01-seed1 decisive-sym-kl01-trappy decisive-sym-kl01-seed2)
    for a in ${ARMS:-${A[*]}}; do
      case $a in
        decisive-anneal) S=(-s "task_schedule=[$(p 0 1.0), $(p 20 0.5), $(p 40 0.0)]") ;;
        decisive-sym) S=(-s env_args.restart_symmetry=true) ;;
        decisive-sym-seed[123]) S=(-s env_args.restart_symmetry=true -s seed=${a#decisive-sym-seed}) ;;
        decisive-sym-kl01) S=(-s env_args.restart_symmetry=true -s kl_coef=0.01) ;;
        decisive-sym-kl0) S=(-s env_args.restart_symmetry=true -s kl_coef=0) ;;
        decisive-sym-kl01-seed[12]) S=(-s env_args.restart_symmetry=true -s kl_coef=0.01
                                       -s seed=${a#decisive-sym-kl01-seed}) ;;
        decisive-sym-kl01-trappy) S=(-s env_args.restart_symmetry=true -s kl_coef=0.01 -s env_args.opponent_style=trappy
                                     -s eval_env_args.opponent_style=uniform) ;;
        decisive-sym-kl01-traps) S=(-s env_args.restart_symmetry=true -s kl_coef=0.01 -s env_args.position_share=0.5
                                    -s env_args.split=train -s env_args.kinds=quiet -s "env_args.position_pieces=[3]"
                                    -s eval_env_args.position_share=0 -s eval_env_args.split=all
                                    -s eval_env_args.kinds=all -s eval_env_args.position_pieces=null) ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      timed forced-$a long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a "${D[@]}" \
        "${S[@]}" --resume
      arm_evals $a $N/$a
      python $X/restarts.py $N/$a --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20
      python $X/decisions.py $N/$a --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20
      n=$(python $X/best_step.py $N/$a/metrics.jsonl)
      for m in "$a-best:$N/$a/checkpoints/step_$(printf %06d $n)/model" "$a:$N/$a/final"; do
        optimal200 "forced-${m%%:*}-games200b-optimal" "${m#*:}" 1618
      done
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    # the start's and kl01's sampled moves (T 0.7, 8 each) on the quiet three-mark boards: value-keeping, first free cell
    for m in late-sft:$N/sft2/final decisive-sym-kl01:$N/decisive-sym-kl01/final; do
      sampled3 "forced-${m%%:*}-sampled-quiet3" "${m#*:}"
    done
    C=(decisive-more=$N/decisive-more); for a in "${A[@]}"; do C+=("$a=$N/$a"); done
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/forced_anneal.png ;;
  forced-shuffled)  # fourteenth round (docs: "Fourteenth round"): the late start rebuilt with its free-cell lists in a
    # random order (free_order=shuffled), everything else as forced-late (same teacher, seeds, mix and two SFT epochs
    # from the retry start): the board order made the first listed cell the lowest free one, and RL sharpened that
    # place in the list into the answer (thirteenth round). Then the thirteenth round's kl01 arm (decisive-more with
    # symmetric restarts and kl_coef 0.01) with seeds 0, 1 and 2, the same at the default kl_coef 0.05, and kl01 with
    # the policy gradient on every sampled token (pg_tokens=all: the shuffled list, where the choice is now written,
    # is outside the "answer" tokens) with seeds 0 and 1, each evaluated as the thirteenth round's arms, and the
    # start's, kl01's and shuffled-all's sampled moves on the quiet three-mark boards; then every run's last three
    # checkpoints averaged (toolgym model average). Two at a time: ARMS=... LOCK=/tmp/a and /tmp/b
    N=$R/forced-shuffled
    mkdir -p $N
    SH=(--teacher-arg free_list=true --teacher-arg free_order=shuffled)
    if [ ! -d $N/sft2/final ]; then
      retry_start
      [ -f $N/positions.jsonl ] || toolgym synth tictactoe "${FT[@]}" "${SH[@]}" -a task=move -a split=train -n 0 \
        -o $N/positions.jsonl
      [ -f $N/games.jsonl ] || toolgym synth tictactoe "${FT[@]}" "${SH[@]}" \
        --teacher-arg invalid_prob=0.3 --teacher-arg invalid_last_prob=0.5 -a min_random_move_prob=0 \
        -a max_random_move_prob=1 -a num_groups=4 -n 1500 --seed 1 --drop-if heldout_visits --failed-turns context \
        -o $N/games.jsonl
      [ -f $N/late.jsonl ] || python $X/late_data.py $N/positions.jsonl $N/late.jsonl $N/games.jsonl
      [ -d $N/sft/final ] || timed forced-shuffled-sft long toolgym sft $X/late_sft.toml -s output_dir=$N/sft \
        -d $N/late.jsonl --resume
      timed forced-shuffled-sft2 long toolgym sft $X/late_sft.toml -s model=$N/sft/final -s output_dir=$N/sft2 -s seed=1 \
        -d $N/late.jsonl --resume
    fi
    rl_evals forced-shuffled-sft $N/sft2/final 2718
    python $X/losses.py $R/eval/forced-shuffled-sft-games200-optimal
    D=("${MORE[@]}" -s env_args.restart_symmetry=true)
    A=(shuffled-kl01 shuffled-kl05 shuffled-kl01-seed1 shuffled-kl01-seed2 shuffled-all shuffled-all-seed1)
    for a in ${ARMS:-${A[*]}}; do
      case $a in
        shuffled-kl01) S=(-s kl_coef=0.01) ;;
        shuffled-kl05) S=(-s kl_coef=0.05) ;;
        shuffled-kl01-seed[12]) S=(-s kl_coef=0.01 -s seed=${a#shuffled-kl01-seed}) ;;
        shuffled-all) S=(-s kl_coef=0.01 -s pg_tokens=all) ;;
        shuffled-all-seed1) S=(-s kl_coef=0.01 -s pg_tokens=all -s seed=1) ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      timed forced-$a long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a "${D[@]}" \
        "${S[@]}" --resume
      arm_evals $a $N/$a
      python $X/decisions.py $N/$a --classes ....XO.O. ....XOO.. ..O.X.O.. --window 20
      n=$(python $X/best_step.py $N/$a/metrics.jsonl)
      for m in "$a-best:$N/$a/checkpoints/step_$(printf %06d $n)/model" "$a:$N/$a/final"; do
        [ "${m%%:*}" = "$a-best" ] && [ "$n" = 60 ] && continue
        optimal200 "forced-${m%%:*}-games200b-optimal" "${m#*:}" 1618
      done
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    # each run's last three checkpoints averaged (toolgym model average: steps 40, 50, 60), also the twelfth and thirteenth
    # rounds' runs with seeds, against the optimal opponent on both fresh seeds (and the twelfth round's step-60 models
    # on the second seed, which that round did not play)
    for a in late-decisive decisive-game decisive-seed1 decisive-seed2 decisive-seed3; do
      optimal200 forced-$a-games200b-optimal $R/forced-late/$a/final 1618
    done
    for rd in "${A[@]/#/$N/}" $R/forced-late/{late-decisive,decisive-seed1,decisive-seed2,decisive-seed3,decisive-game} \
              $R/forced-late/{decisive-more,decisive-anneal,decisive-sym,decisive-sym-seed1} \
              $R/forced-late/{decisive-sym-kl01,decisive-sym-kl01-seed1,decisive-sym-kl01-seed2}; do
      [ -f $rd/avg40-60/model.safetensors ] || toolgym model average $rd --steps 40,50,60 -o $rd/avg40-60
      for s in 2718:games200 1618:games200b; do
        optimal200 "forced-$(basename $rd)-avg-${s#*:}-optimal" $rd/avg40-60 "${s%%:*}"
      done
    done
    for m in shuffled-sft:$N/sft2/final shuffled-kl01:$N/shuffled-kl01/final shuffled-all:$N/shuffled-all/final; do
      sampled3 "forced-${m%%:*}-sampled-quiet3" "${m#*:}"
    done
    C=(decisive-sym-kl01=$R/forced-late/decisive-sym-kl01); for a in "${A[@]}"; do C+=("$a=$N/$a"); done
    python $X/forced_curve.py $R "${C[@]}" --start forced-shuffled-sft-games200-optimal -o $X/forced_shuffled.png ;;
  forced-ema)  # fifteenth round (docs: "Fifteenth round"): the thirteenth round's kl01 arm (decisive-sym-kl01, from the
    # late start) with an exponential moving average of its weights kept during GRPO (ema_decay: about ten steps at
    # 0.9, twenty at 0.95), the run's periodic evals and final/ being the average while the games are sampled with the
    # live weights -- the fourteenth round's named next step against the late swings (each run's periodic eval moves
    # 10-20 points within ten steps). Seeds 0, 1 and 2 at 0.9, seed 0 at 0.95. Each run's average (final/) and its
    # live weights (final_live/) over 400 games on the fresh test seeds, no checkpoint chosen. Then, since the average
    # spoiled seed 0, the other lever against the noise: kl01 with twice the groups per step (batch_size 16, 128 games
    # a step; the reference recipe used 256), seeds 0 and 1, no average (final/ = the live weights). Then kl01 with an
    # invalid move forfeiting every training game, not only restarted ones (invalid_move=forfeit; the evals keep
    # retry), seeds 0 and 1: the turn-cap losses after invalid calls are where the step-60 models part.
    # Two at a time: ARMS=... LOCK=/tmp/a and /tmp/b
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-ema continues run.sh forced-late's start: run that first"; exit 2; }
    A=(ema90-kl01 ema90-kl01-seed1 ema90-kl01-seed2 ema95-kl01 batch16-kl01 batch16-kl01-seed1 kl01-forfeit
       kl01-forfeit-seed1)
    for a in ${ARMS:-${A[*]}}; do
      case $a in
        ema90-kl01) S=(-s ema_decay=0.9) ;;
        ema90-kl01-seed[12]) S=(-s ema_decay=0.9 -s seed=${a#ema90-kl01-seed}) ;;
        ema95-kl01) S=(-s ema_decay=0.95) ;;
        batch16-kl01) S=(-s batch_size=16) ;;
        batch16-kl01-seed1) S=(-s batch_size=16 -s seed=1) ;;
        kl01-forfeit) S=(-s env_args.invalid_move=forfeit -s eval_env_args.invalid_move=retry) ;;
        kl01-forfeit-seed1) S=(-s env_args.invalid_move=forfeit -s eval_env_args.invalid_move=retry -s seed=1) ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      kl01_arm $a "${S[@]}"
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    sampled3 forced-ema90-kl01-sampled-quiet3 $N/ema90-kl01/final
    C=(decisive-sym-kl01=$N/decisive-sym-kl01); for a in "${A[@]}"; do C+=("$a=$N/$a"); done
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/forced_ema.png ;;
  forced-pick)  # fifteenth round, second part (docs: "Fifteenth round"): a checkpoint picked on a larger validation
    # eval instead of the periodic eval's 100 games -- each run's steps 30-60 play 200 greedy games vs the optimal
    # opponent on each of two validation seeds (5151, 6161: neither a test seed nor the periodic eval's), the step
    # with the fewest lost of those 400 (best_step.py --validation) is then played on the test seeds 2718 and 1618.
    # For the thirteenth round's kl01 recipe (three seeds) and this round's batch16 runs. RUNS picks some.
    N=$R/forced-late
    P=(decisive-sym-kl01 decisive-sym-kl01-seed1 decisive-sym-kl01-seed2 batch16-kl01 batch16-kl01-seed1)
    for a in ${RUNS:-${P[*]}}; do
      [ -d $N/$a/final ] || { echo "forced-pick: $N/$a has no finished run (run.sh forced-anneal / forced-ema)"; exit 2; }
      for n in 30 40 50 60; do
        for s in 5151:val1 6161:val2; do
          optimal200 "forced-$a-s$n-${s#*:}-optimal" $N/$a/checkpoints/step_$(printf %06d $n)/model "${s%%:*}"
        done
      done
      n=$(python $X/best_step.py --validation "$R/eval/forced-$a-s{step}-val1-optimal" \
          "$R/eval/forced-$a-s{step}-val2-optimal" --steps 30 40 50 60)
      echo "forced-pick $a: step $n" >> $R/times.txt
      for s in 2718:games200 1618:games200b; do
        optimal200 "forced-$a-picked-${s#*:}-optimal" $N/$a/checkpoints/step_$(printf %06d $n)/model "${s%%:*}"
      done
    done ;;
  forced-slow)  # sixteenth round (docs: "Sixteenth round"): the fifteenth round's untried levers against the late
    # swings of the kl01 recipe -- half the learning rate (1e-4) decayed to zero (cosine) over twice the steps (120);
    # and half the learning rate with twice the groups per step (batch_size 16, 60 steps, cosine). Seed 0 each.
    # Each run's final/ over 400 games on the fresh test seeds, no checkpoint chosen. Two at a time: ARMS=... LOCK=...
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-slow continues run.sh forced-late's start: run that first"; exit 2; }
    A=(slow-kl01 batch16-slow-kl01)
    for a in ${ARMS:-${A[*]}}; do
      case $a in
        slow-kl01) S=(-s learning_rate=1e-4 -s lr_schedule=cosine -s max_steps=120) ;;
        batch16-slow-kl01) S=(-s learning_rate=1e-4 -s lr_schedule=cosine -s batch_size=16) ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      kl01_arm $a "${S[@]}"
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    C=(decisive-sym-kl01=$N/decisive-sym-kl01); for a in "${A[@]}"; do C+=("$a=$N/$a"); done
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/forced_slow.png ;;
  forced-block)  # seventeenth round (docs: "Seventeenth round"): the sixteenth round's batch16-slow-kl01 with the games
    # that are not restarted played against an opponent annealed to optimal (random-move probability up to 1 / 0.5 / 0
    # from steps 0 / 20 / 40, as decisive-anneal), so that attacking instead of blocking stops paying. Seed 0; its
    # final/ over 400 games on the fresh test seeds, no checkpoint chosen. THREADS=2 when it runs alone.
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-block continues run.sh forced-late's start: run that first"; exit 2; }
    A=(batch16-slow-anneal-kl01)
    for a in ${ARMS:-${A[*]}}; do
      case $a in
        batch16-slow-anneal-kl01) S=(-s learning_rate=1e-4 -s lr_schedule=cosine -s batch_size=16
                                     -s "task_schedule=[$(p 0 1.0), $(p 20 0.5), $(p 40 0.0)]") ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      kl01_arm $a "${S[@]}" ${THREADS:+-s num_threads=$THREADS}
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    C=(batch16-slow-kl01=$N/batch16-slow-kl01); for a in "${A[@]}"; do C+=("$a=$N/$a"); done
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/forced_block.png ;;
  forced-temp)  # eighteenth round (docs: "Eighteenth round"): the thirteenth round's kl01 arm (decisive-sym-kl01) from
    # the committed late start (a rebuild: `forced-late-start`), sampling the training games at temperature 1.0
    # instead of 0.7 -- the policy's own distribution, so the moves at the traps are sampled less sharply than the
    # habit the start's text offers -- seeds 0 and 1, beside the recipe at 0.7 with the same seeds from the same start
    # (the documented kl01 runs began from the other build); then, since t10-kl01 attacked instead of blocking, the
    # same with the non-restarted games' opponent annealed to optimal (t10-anneal-kl01: random-move probability up
    # to 1 / 0.5 / 0 from steps 0 / 20 / 40, the seventeenth round's change; t10-kl01-seed1 runs too when named in
    # ARMS). Each run's step-60 model and its last three checkpoints
    # averaged (steps 40, 50, 60) over 400 games on the fresh test seeds. Two at a time: ARMS=... LOCK=/tmp/a, /tmp/b
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-temp continues the late start: run.sh forced-late-start first"; exit 2; }
    A=(t07-kl01 t10-kl01 t07-kl01-seed1 t10-anneal-kl01)
    for a in ${ARMS:-${A[*]}}; do
      case $a in
        t07-kl01) S=() ;;
        t10-kl01) S=(-s temperature=1.0) ;;
        t07-kl01-seed1) S=(-s seed=1) ;;
        t10-kl01-seed1) S=(-s temperature=1.0 -s seed=1) ;;
        t10-anneal-kl01) S=(-s temperature=1.0 -s "task_schedule=[$(p 0 1.0), $(p 20 0.5), $(p 40 0.0)]") ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      kl01_arm $a "${S[@]}" ${THREADS:+-s num_threads=$THREADS}
      [ -f $N/$a/avg40-60/model.safetensors ] || toolgym model average $N/$a --steps 40,50,60 -o $N/$a/avg40-60
      for s in 2718:games200 1618:games200b; do
        optimal200 "forced-$a-avg-${s#*:}-optimal" $N/$a/avg40-60 "${s%%:*}"
      done
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    C=(); for a in "${A[@]}"; do C+=("$a=$N/$a"); done
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/forced_temp.png ;;
  forced-opt)  # nineteenth round (docs: "Nineteenth round"): forced-temp's t10 arm with the quarter of each batch that
    # is not restarted played against the optimal opponent from step 1 (random-move probability 0 throughout), where
    # t10-anneal-kl01 reached it only at step 40: the eighteenth round read t10-kl01's losses as attacks played at
    # block boards, learnt from the weak opponents. Seeds 0 and 1; each run's step-60 model and its last three
    # checkpoints averaged on the 400 test games. Two at a time: ARMS=t10-opt-kl01 LOCK=/tmp/a, ARMS=... LOCK=/tmp/b
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-opt continues the late start: run.sh forced-late-start first"; exit 2; }
    # ARMS=t10-opt-kl01-to90 (or t10-opt-kl01-seed1-to90): that run continued from its step-60 checkpoint to step 90
    # (a copy: its step-60 checkpoint and records, then --resume with max_steps=90), its last three averaged at 70-90
    A=(t10-opt-kl01 t10-opt-kl01-seed1)
    for a in ${ARMS:-${A[*]}}; do
      O=(-s temperature=1.0 -s "task_schedule=[$(p 0 0.0)]")
      steps=40,50,60
      case $a in
        t10-opt-kl01) S=("${O[@]}") ;;
        t10-opt-kl01-seed1) S=("${O[@]}" -s seed=1) ;;
        t10-opt-kl01-to90|t10-opt-kl01-seed1-to90)
          src=${a%-to90}; S=("${O[@]}" -s max_steps=90); [ $src = t10-opt-kl01 ] || S+=(-s seed=1); steps=70,80,90
          [ -d $N/$src/checkpoints/step_000060 ] || { echo "$a continues $src: run ARMS=$src first"; exit 2; }
          from60 $N/$src $N/$a ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      kl01_arm $a "${S[@]}" ${THREADS:+-s num_threads=$THREADS}
      avg_optimal $N/$a $steps
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    C=(t10-anneal-kl01=$N/t10-anneal-kl01)  # each run to step 90 where it was continued (its first 60 steps are the same)
    for a in "${A[@]}"; do if [ -d $N/$a-to90/final ]; then C+=("$a=$N/$a-to90"); else C+=("$a=$N/$a"); fi; done
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/forced_opt.png ;;
  forced-sym|forced-sym3|forced-probe)  # twentieth round (docs: "Twentieth round"): forced-opt's t10-opt-kl01 with
    # symmetry_images = 1 -- each trained game also trained as one image under a random rotation or reflection of the
    # board (the same decisions, the same advantage), so a decision's credit reaches a second orientation in the same
    # step; the nineteenth round read its traps as a habit tied to the orientation (a place in the free-cell list).
    # Seeds 0, 1 and 2, and a third seed of forced-opt's arm without images (t10-opt-kl01-seed2) beside them.
    # forced-sym3, the twenty-first round (docs: "Twenty-first round"): the same with three images per game
    # (symmetry_images = 3), seeds 0-4 (3 and 4 were stopped at step 27-29 and resumed from step 20); forced-probe,
    # the twenty-second round ("Twenty-second round"): forced-sym3's arm with probe_games = 16 -- each step 16 pool
    # games played greedily, not trained on, whose lost games are restarted before the sampled ones (greedy play
    # reaches the traps far more often than the games sampled at 1.0 do), seeds 0, 1 and 2; ARMS=t10-opt-kl01-sym7 (all seven images, seed 0; run with THREADS=2)
    # is not in the list. Each run's step-60 model and its last three checkpoints averaged, on the 400 test games,
    # pooled per arm. Side by side: ARMS=... LOCK=/tmp/a, ARMS=... LOCK=/tmp/b (THREADS=1)
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-sym continues the late start: run.sh forced-late-start first"; exit 2; }
    A=(t10-opt-kl01-sym1 t10-opt-kl01-sym1-seed1 t10-opt-kl01-sym1-seed2 t10-opt-kl01-seed2) k=1 png=forced_sym.png
    [ "$1" = forced-sym3 ] && A=(t10-opt-kl01-sym3 t10-opt-kl01-sym3-seed1 t10-opt-kl01-sym3-seed2 t10-opt-kl01-sym3-seed3
      t10-opt-kl01-sym3-seed4) k=3 png=forced_sym3.png
    [ "$1" = forced-probe ] && A=(t10-opt-kl01-sym3-probe t10-opt-kl01-sym3-probe-seed1 t10-opt-kl01-sym3-probe-seed2) \
      k=3-probe png=forced_probe.png
    # ARMS=t10-opt-kl01-sym1-to90 (and -seed1-to90, -seed2-to90): that run continued from its step-60 checkpoint to
    # step 90 with the same settings (a copy, as forced-opt's -to90 arms), its last three averaged at 70-90
    for a in ${ARMS:-${A[*]}}; do
      S=(-s temperature=1.0 -s "task_schedule=[$(p 0 0.0)]")
      steps=40,50,60
      case ${a%-to90} in
        t10-opt-kl01-sym1) S+=(-s symmetry_images=1) ;;
        t10-opt-kl01-sym1-seed1) S+=(-s symmetry_images=1 -s seed=1) ;;
        t10-opt-kl01-sym1-seed2) S+=(-s symmetry_images=1 -s seed=2) ;;
        t10-opt-kl01-seed2) S+=(-s seed=2) ;;
        t10-opt-kl01-sym3) S+=(-s symmetry_images=3) ;;
        t10-opt-kl01-sym3-seed1) S+=(-s symmetry_images=3 -s seed=1) ;;
        t10-opt-kl01-sym3-seed2) S+=(-s symmetry_images=3 -s seed=2) ;;
        t10-opt-kl01-sym3-seed3) S+=(-s symmetry_images=3 -s seed=3) ;;
        t10-opt-kl01-sym3-seed4) S+=(-s symmetry_images=3 -s seed=4) ;;
        t10-opt-kl01-sym3-probe) S+=(-s symmetry_images=3 -s probe_games=16) ;;
        t10-opt-kl01-sym3-probe-seed1) S+=(-s symmetry_images=3 -s probe_games=16 -s seed=1) ;;
        t10-opt-kl01-sym3-probe-seed2) S+=(-s symmetry_images=3 -s probe_games=16 -s seed=2) ;;
        t10-opt-kl01-sym3-probe4) S+=(-s symmetry_images=3 -s probe_games=4) ;;  # ARMS= only (seed 0, THREADS=2)
        t10-opt-kl01-sym7) S+=(-s symmetry_images=7 -s max_minutes=55) ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      if [ "$a" != "${a%-to90}" ]; then
        src=${a%-to90}; S+=(-s max_steps=90); steps=70,80,90
        [ -d $N/$src/checkpoints/step_000060 ] || { echo "$a continues $src: run ARMS=$src first"; exit 2; }
        from60 $N/$src $N/$a
      fi
      kl01_arm $a "${S[@]}" ${THREADS:+-s num_threads=$THREADS}
      avg_optimal $N/$a $steps
    done
    for a in "${A[@]}"; do [ -d $N/$a/final ] || exit 0; done
    # arms run side by side that finish together all get here: one end block at a time (its evals --resume, so a
    # later copy finds them done instead of writing the same eval folder at once)
    if command -v flock >/dev/null; then exec 9>"$R/.$1-end.lock"; flock 9; fi
    pool() { local a; for a in "${A[@]}"; do [ $a = t10-opt-kl01-seed2 ] || printf 'forced-%s%s,' $a "${1:-}"; done | sed 's/,$//'; }
    P=(--pool "sym$k=$(pool)" --pool "sym$k-avg=$(pool -avg)")
    [ $k = 1 ] && P+=(--pool "no-images-seed2=forced-t10-opt-kl01-seed2" --pool "no-images-seed2-avg=forced-t10-opt-kl01-seed2-avg")
    python $X/results_table.py $R "${P[@]}"
    C=(); for a in "${A[@]}"; do if [ -d $N/$a-to90/final ]; then C+=("$a=$N/$a-to90"); else C+=("$a=$N/$a"); fi; done
    python $X/forced_curve.py $R "${C[@]}" --start forced-late-sft-games200-optimal -o $X/$png
    if [ "$1" != forced-sym ]; then  # every seed's step-60 model on two seeds no choice here used (3141 and 5772: 200
      # games each vs the optimal opponent, 200 on 3141 vs the random one); pooled per arm
      for a in "${A[@]}"; do
        for s in 3141:games200 5772:games200b; do optimal200 "forced-$a-fresh-${s#*:}-optimal" $N/$a/final "${s%%:*}"; done
        games200 "forced-$a-fresh-games200-random" $N/$a/final 3141 1
      done
      python $X/results_table.py $R --pool "sym$k-fresh=$(pool -fresh)"
      python $X/decisions.py $N/${A[0]} --reach $R/eval/forced-${A[0]}-games200-optimal
      [ "$1" = forced-probe ] && { greedy3 forced-t10-opt-kl01-sym3-probe-avg $N/t10-opt-kl01-sym3-probe/avg40-60; exit 0; }
      # greedy against sampled moves on the quiet three-mark boards: the start, and
      # seed 0's averaged model with one, three (and seven, when ARMS=t10-opt-kl01-sym7 has run) images
      greedy3 forced-late-sft $N/sft2/final
      for a in t10-opt-kl01-sym1 t10-opt-kl01-sym3 t10-opt-kl01-sym7; do
        if [ -d $N/$a/avg40-60 ]; then greedy3 forced-$a-avg $N/$a/avg40-60; fi
      done
    fi ;;
  forced-sym-soup)  # twentieth round, after forced-sym: the three seeds' averaged models (avg40-60) averaged into one
    # (a soup across seeds of one start), on the 400 test games, on 200 games of a seed no round has evaluated on
    # (3141), the held-out positions and the random opponent
    N=$R/forced-late
    S=(t10-opt-kl01-sym1 t10-opt-kl01-sym1-seed1 t10-opt-kl01-sym1-seed2)
    for a in "${S[@]}"; do [ -f $N/$a/avg40-60/model.safetensors ] || { echo "run.sh forced-sym first ($a)"; exit 2; }; done
    [ -f $N/sym1-soup/model.safetensors ] || toolgym model average $(for a in "${S[@]}"; do printf '%s ' $N/$a/avg40-60; done) -o $N/sym1-soup
    rl_evals forced-sym1-soup $N/sym1-soup 2718
    optimal200 forced-sym1-soup-games200b-optimal $N/sym1-soup 1618
    optimal200 forced-sym1-soup-fresh-games200-optimal $N/sym1-soup 3141
    for a in "${S[@]}"; do optimal200 "forced-$a-avg-fresh-games200-optimal" $N/$a/avg40-60 3141; done
    python $X/losses.py $R/eval/forced-sym1-soup-games200-optimal
    python $X/results_table.py $R --pool "soup=forced-sym1-soup" --pool "soup-fresh=forced-sym1-soup-fresh" \
      --pool "sym1-avg-fresh=$(for a in "${S[@]}"; do printf 'forced-%s-avg-fresh,' $a; done | sed 's/,$//')" ;;
  forced-summary)  # the summary of RL on whole games (docs: "Whole games against the minimax opponent: where it
    # stands"), after forced-sym3: the late start on the seeds its five models played (the optimal opponent on the
    # test seeds 2718 and 1618 and the fresh 3141 and 5772, the random one on 2718 and 3141), every quiet position
    # for the start and each model, discovery.py per run and pooled over the five, the pooled tables, then the
    # exact losses of every checkpoint (exact_games.py) and the exact curve (exact_curve.py, forced_exact.png)
    N=$R/forced-late
    A=(t10-opt-kl01-sym3 t10-opt-kl01-sym3-seed1 t10-opt-kl01-sym3-seed2 t10-opt-kl01-sym3-seed3 t10-opt-kl01-sym3-seed4)
    for a in "${A[@]}"; do [ -d $N/$a/final ] || { echo "run.sh forced-sym3 first ($a)"; exit 2; }; done
    S=$N/sft2/final
    optimal200 forced-late-sft-games200-optimal $S 2718
    optimal200 forced-late-sft-games200b-optimal $S 1618
    optimal200 forced-late-sft-fresh-games200-optimal $S 3141
    optimal200 forced-late-sft-fresh-games200b-optimal $S 5772
    games200 forced-late-sft-games200-random $S 2718 1
    games200 forced-late-sft-fresh-games200-random $S 3141 1
    quiet forced-late-sft $S
    J=()
    for a in "${A[@]}"; do
      discover $a
      J+=($R/eval/forced-$a-discovery.json)
    done
    python $X/discovery.py --pool "${J[@]}"
    pool() { local a; for a in "${A[@]}"; do printf 'forced-%s%s,' $a "${1:-}"; done | sed 's/,$//'; }
    python $X/results_table.py $R forced-late-sft "${A[@]/#/forced-}" --pool start=forced-late-sft \
      --pool start-fresh=forced-late-sft-fresh --pool "sym3=$(pool)" --pool "sym3-fresh=$(pool -fresh)"
    # exact losses against the perfect opponent (every line of play once, weighted): the start, the committed
    # default, every checkpoint of the five runs and their averaged models; the exact curve
    exact forced-late-sft $S
    exact forced-late-sft $S random
    exact default envs/tictactoe/toolgym_tictactoe/checkpoint
    exact default envs/tictactoe/toolgym_tictactoe/checkpoint random
    for a in "${A[@]}"; do
      exact forced-$a $N/$a/final
      exact forced-$a $N/$a/final random
      exact forced-$a-avg $N/$a/avg40-60
      for s in 10 20 30 40 50; do exact forced-$a-step$s $N/$a/checkpoints/step_0000$s/model; done
    done
    E=()  # the forced-exact seeds, with their own exact periodic evals every 5 steps, when they have run
    for a in $N/t10-opt-kl01-sym3-exact-seed5 $N/t10-opt-kl01-sym3-exact-seed6 $N/t10-opt-kl01-sym3-det-seed*; do
      [ -f $a/final/config.json ] && E+=($a)
    done
    python $X/exact_curve.py $R/eval/exact "${A[@]/#/forced-}" "${E[@]}" --start forced-late-sft -o $X/forced_exact.png ;;
  forced-best-summary)  # after ARMS=t10-opt-kl01-sym3-best-seed11 (12, 13) run.sh forced-exact (docs: "where it
    # stands"): the runs that kept their best by the exact eval and went back to it (revert_to_best). Their exact
    # curves (the evals, then the best kept: forced_best.png), 400 greedy games each against the optimal opponent on
    # the fresh seeds 4711 + 6007 and 200 against the random one on 4711 (seeds no earlier eval used; the start too),
    # every quiet position and discovery.py per run and pooled, the pooled results table, and each model through
    # toolgym serve (served_exact.py, both opponents; the start and the committed default too), and the fresh-seed
    # games checked against each exact walk (seed_draw.py: how much of them is the seeds' draw), and where the wins
    # against random play are lost (win_shortfall.py). Each run's kept
    # weights (best/) are the ones tested. BEST=t10-mix05-kl01-sym3-keep PNG=forced_mix.png: the same for that arm;
    # BEST=t10-opt-kl01-sym3-keep100 PNG=forced_keep100.png: the twenty-fifth round's
    BEST=${BEST:-t10-opt-kl01-sym3-best} N=$R/forced-late S=$R/forced-late/sft2/final B=()
    for a in $N/$BEST-seed*; do [ -f $a/final/config.json ] && [ -f $a/best/best.json ] && B+=($(basename $a)); done
    [ ${#B[@]} -gt 0 ] || { echo "ARMS=$BEST-seed11 run.sh forced-exact first"; exit 2; }
    optimal200 forced-late-sft-fresh2-games200-optimal $S 4711
    optimal200 forced-late-sft-fresh2-games200b-optimal $S 6007
    games200 forced-late-sft-fresh2-games200-random $S 4711 1
    quiet forced-late-sft $S
    exact forced-late-sft $S
    exact forced-late-sft $S random
    for o in optimal random; do served start hf:$S $o; served default default $o; done
    J=()
    for a in "${B[@]}"; do
      optimal200 forced-$a-fresh2-games200-optimal $N/$a/best 4711
      optimal200 forced-$a-fresh2-games200b-optimal $N/$a/best 6007
      games200 forced-$a-fresh2-games200-random $N/$a/best 4711 1
      discover $a $N/$a/best
      served ${a#t10-} hf:$N/$a/best; served ${a#t10-} hf:$N/$a/best random
      J+=($R/eval/forced-$a-discovery.json)
    done
    python $X/discovery.py --pool "${J[@]}"
    fresh=$(for a in "${B[@]}"; do printf 'forced-%s-fresh2,' $a; done | sed 's/,$//')
    python $X/results_table.py $R forced-late-sft-fresh2 "${B[@]/#/forced-}" --pool start=forced-late-sft-fresh2 \
      --pool "best=$fresh"
    # the fresh-seed games against each model's exact walk: every game replayed, the seeds' draw (seed_draw.py)
    D=(); W=()
    for a in "${B[@]}"; do
      g=$R/eval/forced-$a-fresh2-games200
      D+=("$R/eval/exact/forced-$a-best.json=$g-optimal/results.jsonl,${g}b-optimal/results.jsonl")
      W+=("$R/eval/exact/forced-$a-best-random.json=$g-random/results.jsonl")
    done
    python $X/seed_draw.py "${D[@]}"
    python $X/seed_draw.py "${W[@]}" --outcome win --fresh 5000
    # where the kept models leave wins against random play, against the never-losing bound (win_shortfall.py)
    python $X/win_shortfall.py $(for a in "${B[@]}"; do printf '%s ' "$R/eval/exact/forced-$a-best-random.json=$N/$a"; done) \
      --start $R/eval/exact/forced-late-sft-random.json
    python $X/exact_curve.py $R/eval/exact "${B[@]/#/$N/}" --start forced-late-sft
    python $X/exact_curve.py $R/eval/exact "${B[@]/#/$N/}" --start forced-late-sft --kept -o $X/${PNG:-forced_best.png} ;;
  forced-frontier)  # twenty-seventh round (docs: "each checkpoint on both targets"): after forced-exact, every saved
    # checkpoint of BEST's runs (arms, space-separated) whose exact losses are under 5 % walked against random play,
    # then frontier.py: the steps that meet both game targets, the most wins under the loss target, each run's
    # Pareto front, the reference players; PNG (default forced_frontier.png)
    N=$R/forced-late F=()
    for b in ${BEST:-t10-opt-kl01-sym3-keep100 t10-mix05-kl01-sym3-keep100}; do
      for a in $N/$b-seed*; do [ -f $a/metrics.jsonl ] && [ -d $a/final ] && F+=($a); done
    done
    [ ${#F[@]} -gt 0 ] || { echo "ARMS=t10-opt-kl01-sym3-keep100-seed11 run.sh forced-exact first"; exit 2; }
    for a in "${F[@]}"; do  # the kept and the final weights' walks, if forced-exact has not made them
      exact forced-$(basename $a) $a/final random
      [ -f $a/best/best.json ] && exact forced-$(basename $a)-best $a/best random
    done
    python $X/frontier.py $R/eval/exact "${F[@]}" --missing > $R/frontier-todo.txt
    while read -r name model; do exact "$name" "$model" random; done < $R/frontier-todo.txt
    python $X/frontier.py $R/eval/exact "${F[@]}" -o $X/${PNG:-forced_frontier.png} ;;
  forced-late-patch)  # twenty-ninth round (docs: "a late-board phase for the served model"): after forced-exact, a
    # short GRPO phase from each arm's kept weights (late_patch.toml): half the games from late boards (5-8 marks) in a
    # fresh conversation, as toolgym serve asks them, half whole games, an invalid move forfeiting; then both weights
    # walked in their own games and through toolgym serve, against both opponents. PATCH=move: the one-move variant
    # (every task a late board alone, the move's value as reward), which fixed the served boards and broke one in games
    N=$R/forced-late
    for a in ${ARMS:-t10-opt-trap2-kl01-sym3-keep100-seed14}; do
      [ -f $N/$a/best/best.json ] || { echo "ARMS=$a run.sh forced-exact first"; exit 2; }
      P=late-patch${PATCH:+-$PATCH}-$a
      M=()
      [ "${PATCH:-}" = move ] && M=(-s env_args.task=move -s env_args.position_share=0 -s num_examples=2705
                                     -s env_args.invalid_move=retry)
      timed forced-$P long toolgym train $X/late_patch.toml -s model=$N/$a/best -s output_dir=$N/$P "${M[@]}" \
        ${THREADS:+-s num_threads=$THREADS} --resume
      for m in forced-$a-best:$N/$a/best forced-$P:$N/$P/final; do
        exact "${m%%:*}" "${m#*:}"; exact "${m%%:*}" "${m#*:}" random
        served "${m%%:*}" "hf:${m#*:}"; served "${m%%:*}" "hf:${m#*:}" random
      done
    done ;;
  forced-exact)  # after forced-sym3 (docs: "where it stands"): two more seeds (5, 6) of its arm with the periodic eval
    # exact (eval_exact: every line of play against the optimal opponent, weighted) every 5 steps and a checkpoint every
    # 5, then each final model exactly against both opponents. Side by side: ARMS=... LOCK=/tmp/a, ARMS=... LOCK=/tmp/b
    # (THREADS=1). ARMS=t10-opt-kl01-sym3-exact-cos-seed5 (and -seed6): the same with the learning rate decayed to 0
    # (lr_schedule = cosine), to see whether the late swings of the exact curve calm down. ARMS=t10-opt-kl01-sym3-det-seed7:
    # the recipe with deterministic = true (lock-step batching, games seeded by job): run it in two fresh clones and
    # compare the two run folders with same_run.py (docs: "where it stands", reproducible).
    # ARMS=t10-opt-kl01-sym3-best-seed11 (12, 13): deterministic, and from step 20 on every exact eval that is worse than
    # the best so far puts the best weights back (revert_to_best), so the run ends on its best (docs: "where it stands").
    # ARMS=t10-opt-kl01-sym3-keep-seed11 (12, 13): the same best kept (best/), without going back to it
    # ARMS=t10-opt-kl01-sym3-keep100-seed11 (12, 13): that arm trained on to step 100 (docs: "twenty-fifth round")
    # ARMS=t10-mix05-kl01-sym3-keep-seed11 (12, 13): kept the same way, the games that are not restarted against an
    # opponent whose random-move probability is drawn up to 0.5 instead of the optimal one (docs: "where it stands")
    # ARMS=t10-mix05-kl01-sym3-keep100-seed14 (15): both, over 100 steps (docs: "twenty-sixth round")
    # ARMS=t10-mix05-kl01-sym3-both100-seedN: that, with the best kept by losses less wins against random play
    # ARMS=t10-mix05-d08-kl01-sym3-keep100-seed14 (15): keep100-mix05 with a draw worth 0.8 (docs: "twenty-seventh round")
    # ARMS=t10-opt-trap-kl01-sym3-keep100-seedN: keep100 with restarts against the random opponent from boards of
    # choices among value-keeping moves (restart_trap_share; docs: "twenty-seventh round")
    # ARMS=t10-opt-trap1h-kl01-sym3-keep100-seedN: keep100 and one trap group more a step, against an opponent at
    # random-move probability 0.5 (docs: "twenty-eighth round")
    # ARMS=t10-opt-trap2-kl01-sym3-keep100-seedN: keep100 and two trap groups more a step, against the random player
    # (docs: "twenty-eighth round"; run alone with THREADS=2)
    N=$R/forced-late
    [ -d $N/sft2/final ] || { echo "forced-exact continues the late start: run.sh forced-late-start first"; exit 2; }
    for a in ${ARMS:-t10-opt-kl01-sym3-exact-seed5 t10-opt-kl01-sym3-exact-seed6}; do
      case $a in
        t10-opt-kl01-sym3-exact-seed[0-9]) S=() ;;
        t10-opt-kl01-sym3-exact-cos-seed[0-9]) S=(-s lr_schedule=cosine) ;;  # the learning rate decayed to 0 by step 60
        t10-opt-kl01-sym3-det-seed[0-9]*) S=(-s deterministic=true) ;;  # bit-reproducible: the same run in any clone
        # ... and back to the best weights by the exact eval whenever an eval from step 20 on is worse (revert_to_best)
        t10-opt-kl01-sym3-best-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss -s best_from_step=20
                                           -s revert_to_best=true) ;;
        # ... or only keep the best (best/), training on from wherever the run is
        t10-opt-kl01-sym3-keep-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss -s best_from_step=20) ;;
        # ... the same, trained on to step 100 (more proposals for the best kept; from a run of the arm above: copy its
        # folder without final/, then this resumes it from its last checkpoint, the best kept so far carried on)
        t10-opt-kl01-sym3-keep100-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss -s best_from_step=20
                                                -s max_steps=100) ;;
        # ... kept the same way, with the quarter of each batch that is not restarted played against an opponent whose
        # random-move probability is drawn up to 0.5 (at most 0.5 an attack instead of a block does not pay on average;
        # a move that sets a trap for a weaker player does), for the wins against random
        t10-mix05-kl01-sym3-keep-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss -s best_from_step=20
                                                -s "task_schedule=[$(p 0 0.5)]") ;;
        # ... both: the weaker opponents of the arm above and the 100 steps of keep100 (twenty-sixth round)
        t10-mix05-kl01-sym3-keep100-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss
                                                   -s best_from_step=20 -s max_steps=100 -s "task_schedule=[$(p 0 0.5)]") ;;
        # ... the same, the best kept by both exact measures: losses against the optimal opponent less wins against
        # the random one, walked at every eval (eval_sets; about 1.5-2.5 min more an eval on these cores)
        # ... the weaker opponents and 100 steps of keep100-mix05, a draw worth 0.8 instead of 0.5 (twenty-seventh
        # round): a trap's win pays 0.2 over a draw and a lost gamble costs 0.8, so a move that loses to the optimal
        # player must win four times as often as it loses before it pays, where 0.5 made it one to one
        t10-mix05-d08-kl01-sym3-keep100-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss
          -s best_from_step=20 -s max_steps=100 -s "task_schedule=[$(p 0 0.5)]" -s env_args.draw_reward=0.8) ;;
        # ... keep100 (the optimal opponent only) with a third of the restarted groups from boards where the model
        # chose among value-keeping moves, against the random opponent (restart_trap_share): the choice that the
        # optimal opponent never rewards, compared within a group (docs: "twenty-seventh round", not run yet)
        t10-opt-trap-kl01-sym3-keep100-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss
          -s best_from_step=20 -s max_steps=100 -s env_args.restart_trap_share=0.34) ;;
        # ... the trap arm above took its two groups from the lost games' share: with four replayed of six restarted
        # groups, none were left for lost games' boards (and the replay buffer nothing new to score). Here keep100's
        # eight groups stay as they were (two new games, four replayed, two from lost games) and a ninth restarts
        # from a trap board, against an opponent at random-move probability 0.5: at 1 a value-losing move pays more
        # than every value-keeping one on 4.6 % of the trap boards, at 0.5 on none (shortcuts.trap_gambles)
        t10-opt-trap1h-kl01-sym3-keep100-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss
          -s best_from_step=20 -s max_steps=100 -s batch_size=9 -s env_args.restart_replay=0.57
          -s env_args.restart_trap_share=0.15 -s env_args.restart_trap_random=0.5) ;;
        # ... two trap groups more, against the random player as in the twenty-seventh round's trap arm, on keep100's
        # unchanged eight (round(0.75 * 10) = 8 restarted: 4 replayed, 2 trap, 2 from lost games; 2 new games)
        t10-opt-trap2-kl01-sym3-keep100-seed[0-9]*) S=(-s deterministic=true -s best_metric=eval/exact/loss
          -s best_from_step=20 -s max_steps=100 -s batch_size=10 -s env_args.restart_replay=0.5
          -s env_args.restart_trap_share=0.25) ;;
        t10-mix05-kl01-sym3-both100-seed[0-9]*) S=(-s deterministic=true -s best_from_step=20 -s max_steps=100
          -s "task_schedule=[$(p 0 0.5)]" -s eval_sets.random.min_random_move_prob=1
          -s eval_sets.random.max_random_move_prob=1
          -s 'best_metric={"eval/exact/loss": 1, "eval/random/exact/win": -1}') ;;
        *) echo "unknown arm $a"; exit 2 ;;
      esac
      timed forced-$a long toolgym train $X/forced_grpo.toml -s model=$N/sft2/final -s output_dir=$N/$a "${MORE[@]}" \
        -s env_args.restart_symmetry=true -s kl_coef=0.01 -s temperature=1.0 -s "task_schedule=[$(p 0 0.0)]" \
        -s symmetry_images=3 -s seed=${a##*seed} -s eval_exact=true -s eval_every=5 -s save_every=5 "${S[@]}" \
        ${THREADS:+-s num_threads=$THREADS} --resume
      exact forced-$a $N/$a/final
      exact forced-$a $N/$a/final random
      if [ -f $N/$a/best/best.json ]; then exact forced-$a-best $N/$a/best; exact forced-$a-best $N/$a/best random; fi
    done ;;
esac
