#!/usr/bin/env bash
# The multi-server walkthrough end to end on CPU: teacher data -> tiny model -> SFT -> held-out evaluation.
#   examples/multi_server/run.sh [synth|init|sft|eval|all]   (default: all; run from the repository root)
# Measured (docs/envs/multi-server.md): ~30 min of SFT on 2 shared cores; the held-out targets are not reached.
set -euo pipefail
cd "$(dirname "$0")/../.."
TG=${TG:-.venv/bin/toolgym}
PY=${PY:-.venv/bin/python}
R=runs/multi_server
ENV=examples/multi_server/env.toml
step=${1:-all}
mkdir -p "$R"
if [[ $step == synth || $step == all ]]; then   # 4,000 training tasks; the reference player, concise answers
  $PY examples/multi_server/make_tasks.py 4000 240 "$R"
  $TG synth $ENV -m scripted:reference --teacher-arg answer_from=task -n 0 -c 8 --min-reward 1.5 \
    -a tasks="$PWD/$R/tasks.jsonl" -o $R/teacher.jsonl
fi
if [[ $step == init || $step == all ]]; then    # tokenizer trained on the teacher text; random weights
  $TG model init-tiny --out $R/tiny --size small --corpus chatml --corpus-file $R/teacher.jsonl
fi
if [[ $step == sft || $step == all ]]; then
  $TG sft examples/multi_server/sft.toml
fi
if [[ $step == eval || $step == all ]]; then    # untrained vs SFT on the held-out split (greedy), per task kind
  for m in tiny sft/final; do
    $TG eval $ENV -a tasks=heldout.jsonl -n 0 -c 8 -m hf:$R/$m -t 0 --max-tokens 160 -o "$R/eval-${m%%/*}"
  done
fi
