"""Training: teacher data synthesis (`synth`), supervised warm-up (`sft`) and the GRPO loop (`train`).

Import-light on purpose: torch/transformers/peft are imported inside the modules that need them.

    toolgym.train.loss        advantages + the policy-gradient loss variants (grpo, dr_grpo, dapo, cispo, gspo) + KL
    toolgym.train.config      pydantic configs (GRPOConfig, SFTConfig), every field documented
    toolgym.train.data        trajectories <-> chat-with-tools rows, tokenisation, padding, stratified sampling
    toolgym.train.synth       teacher rollouts -> filtered JSONL / HF dataset
    toolgym.train.sft         supervised fine-tuning on assistant-only masks
    toolgym.train.grpo        the GRPO loop (colocated in-process engine)
    toolgym.train.runstate    run folder: checkpoints (+ optimizer/RNG), resume, metrics JSONL, loggers
    toolgym.train.plot        training curves to PNG
    toolgym.train.cli         the typer sub-app: synth, sft, train, plot
"""
