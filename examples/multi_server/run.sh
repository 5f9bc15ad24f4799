#!/usr/bin/env bash
# The multi-server walkthrough end to end on CPU: teacher data -> tiny model -> SFT -> GRPO -> held-out evaluation.
#   examples/multi_server/run.sh [synth|init|sft|grpo|eval|all]   (default: all; run from the repository root)
#   examples/multi_server/run.sh [synth|base-sft|base-grpo|base-eval|base]   the same from the tool-calling base
#     (toolgym/models/toolcall_base: pre-trained to copy values into calls; no init step, it keeps its tokenizer)
#   examples/multi_server/run.sh [quote-synth|quote-sft|quote-grpo|quote-eval|quote]   the same from the base with a
#     teacher that quotes the result line holding the answer before answering (answer_from=quote)
# Measured (docs/envs/multi-server.md): synth 20 s, SFT ~19 min, GRPO ~8 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
TG=${TG:-.venv/bin/toolgym}
PY=${PY:-.venv/bin/python}
R=runs/multi_server
ENV=examples/multi_server/env.toml
step=${1:-all}
mkdir -p "$R"
if [[ $step == synth || $step == all ]]; then   # 16,000 training tasks; the reference player, concise answers
  $PY examples/multi_server/make_tasks.py 16000 240 "$R"
  $TG synth $ENV -m scripted:reference --teacher-arg answer_from=task -n 0 -c 8 --min-reward 1.5 \
    -a tasks="$PWD/$R/tasks.jsonl" -o $R/teacher.jsonl
fi
if [[ $step == init || $step == all ]]; then    # tokenizer trained on the teacher text; random weights
  $TG model init-tiny --out $R/tiny --size small --corpus chatml --corpus-file $R/teacher.jsonl
fi
if [[ $step == sft || $step == all ]]; then
  $TG sft examples/multi_server/sft.toml
fi
if [[ $step == grpo || $step == all ]]; then
  $TG train examples/multi_server/grpo.toml
fi
if [[ $step == base-sft || $step == base ]]; then
  $TG sft examples/multi_server/base_sft.toml
fi
if [[ $step == base-grpo || $step == base ]]; then
  $TG train examples/multi_server/base_grpo.toml
fi
if [[ $step == base-eval || $step == base ]]; then   # the base, base-SFT and base-GRPO on the held-out split
  for m in toolgym/models/toolcall_base runs/multi_server/base-sft/final runs/multi_server/base-grpo/final; do
    name=$(basename "$(dirname "$m")")-$(basename "$m"); rm -rf "$R/eval-$name"
    $TG eval $ENV -a tasks=heldout.jsonl -n 0 -c 8 -m hf:$m -t 0 --max-tokens 160 -o "$R/eval-$name"
  done
  $PY examples/multi_server/plot_results.py $R/eval-models-toolcall_base $R/eval-base-sft-final $R/eval-base-grpo-final \
    --labels base base-SFT base-GRPO -o examples/multi_server/base_heldout.png
  $TG plot $R/base-grpo -o examples/multi_server/base_grpo_curves.png
fi
if [[ $step == quote-synth || $step == quote ]]; then   # the same tasks; the answer turn quotes its evidence line
  [ -f $R/tasks.jsonl ] || $PY examples/multi_server/make_tasks.py 16000 240 "$R"
  $TG synth $ENV -m scripted:reference --teacher-arg answer_from=quote -n 0 -c 8 --min-reward 1.5 \
    -a tasks="$PWD/$R/tasks.jsonl" -o $R/teacher_quote.jsonl
fi
if [[ $step == quote-sft || $step == quote ]]; then      # base_sft.toml on the quoting teacher's rows, 1,000 steps
  $TG sft examples/multi_server/base_sft.toml -d $R/teacher_quote.jsonl -s output_dir=$R/quote-sft -s epochs=${QUOTE_EPOCHS:-1.0}
fi
if [[ $step == quote-grpo || $step == quote ]]; then     # base_grpo.toml from the quoting SFT model
  $TG train examples/multi_server/base_grpo.toml -s model=$R/quote-sft/final -s output_dir=$R/quote-grpo
fi
if [[ $step == quote-eval || $step == quote ]]; then     # base-SFT (answer_from=task) vs quote-SFT vs quote-GRPO
  for m in quote-sft/final quote-grpo/final; do
    rm -rf "$R/eval-${m%%/*}"
    $TG eval $ENV -a tasks=heldout.jsonl -n 0 -c 8 -m hf:$R/$m -t 0 --max-tokens 160 -o "$R/eval-${m%%/*}"
  done
  runs=($R/eval-quote-sft $R/eval-quote-grpo); labels=(quote-SFT quote-GRPO)
  if [ -d $R/eval-base-sft-final ]; then runs=($R/eval-base-sft-final "${runs[@]}"); labels=(base-SFT "${labels[@]}"); fi
  $PY examples/multi_server/plot_results.py "${runs[@]}" --labels "${labels[@]}" -o examples/multi_server/quote_heldout.png
  $TG plot $R/quote-grpo -o examples/multi_server/quote_grpo_curves.png
fi
if [[ $step == eval || $step == all ]]; then    # untrained vs SFT vs GRPO on the held-out split (greedy), per task kind
  for m in tiny sft/final grpo/final; do
    rm -rf "$R/eval-${m%%/*}"                    # a re-run measures afresh
    $TG eval $ENV -a tasks=heldout.jsonl -n 0 -c 8 -m hf:$R/$m -t 0 --max-tokens 160 -o "$R/eval-${m%%/*}"
  done
  $PY examples/multi_server/plot_results.py $R/eval-tiny $R/eval-sft $R/eval-grpo --labels untrained SFT GRPO -o examples/multi_server/heldout.png
  $TG plot $R/grpo -o examples/multi_server/grpo_curves.png
fi
