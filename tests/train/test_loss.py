"""Every loss variant against values computed by hand (see the comments for the arithmetic)."""

from __future__ import annotations

import math

import pytest
import torch

from toolgym.train.loss import group_advantages, policy_loss, token_logprobs, token_weights

# two sequences, 3 positions; position 0 is prompt. seq0 has 2 assistant tokens, seq1 one.
MASK = torch.tensor([[0.0, 1, 1], [0, 1, 0]])
OLD = torch.tensor([[0.0, -1.2, -1.9], [0, -0.5, 0]])
ADV = torch.tensor([1.0, -0.5])
# ratios: seq0 exp(0.2)=1.221403, exp(-0.1)=0.904837; seq1 exp(0)=1


def _logp() -> torch.Tensor:
    return torch.tensor([[0.0, -1.0, -2.0], [0, -0.5, 0]], requires_grad=True)


def _loss(kind: str, **kw):  # type: ignore[no-untyped-def]
    logp = _logp()
    w = token_weights(MASK, kind, n_seqs=2, n_tokens=3, max_len=4)
    loss, stats = policy_loss(logp, OLD, ADV, w, kind, **kw)
    loss.backward()
    return float(loss.detach()), logp.grad, stats


def test_grpo_hand_computed() -> None:
    # seq0 (A=1): min(1.2214, clip 1.2) = 1.2 -> -1.2 ; min(0.9048, 0.9048) -> -0.904837 ; each weight 1/2/2
    # seq1 (A=-0.5): min(-0.5, -0.5) -> +0.5 ; weight 1/1/2
    loss, grad, stats = _loss("grpo", eps_low=0.2, eps_high=0.2)
    assert loss == pytest.approx(0.25 * -1.2 + 0.25 * -math.exp(-0.1) + 0.5 * 0.5, abs=1e-6)
    assert loss == pytest.approx(-0.276209, abs=1e-6)
    assert grad[0, 1] == 0.0  # clipped (ratio 1.22 > 1.2 with A > 0): no gradient
    assert grad[0, 2] == pytest.approx(-0.25 * math.exp(-0.1), abs=1e-6)  # d(-r*A)/dlogp = -r*A
    assert stats["clip_frac"] == pytest.approx(1 / 3)


def test_dapo_clip_higher_token_level() -> None:
    # eps_high 0.28: 1.2214 is inside [0.8, 1.28] -> -1.221403 ; -0.904837 ; +0.5 ; mean over 3 tokens
    loss, grad, stats = _loss("dapo", eps_low=0.2, eps_high=0.28)
    assert loss == pytest.approx((-math.exp(0.2) - math.exp(-0.1) + 0.5) / 3, abs=1e-6)
    assert loss == pytest.approx(-0.542080, abs=1e-6)
    assert grad[0, 1] == pytest.approx(-math.exp(0.2) / 3, abs=1e-6)
    assert stats["clip_frac"] == 0.0


def test_dr_grpo_constant_normaliser() -> None:
    # same per-token terms as grpo, summed, / (n_seqs * max_len) = 8
    loss, _, _ = _loss("dr_grpo", eps_low=0.2, eps_high=0.2)
    assert loss == pytest.approx((-1.2 - math.exp(-0.1) + 0.5) / 8, abs=1e-6)
    assert loss == pytest.approx(-0.200605, abs=1e-6)


def test_gspo_sequence_ratio() -> None:
    # seq0: s = exp(mean(0.2, -0.1)) = exp(0.05) = 1.051271 (inside the clip) for both tokens -> 2 * 0.25 * -1.051271
    # seq1: s = 1 -> 0.5 * 0.5. gradient on each seq0 token: -s*A*weight = -0.262818
    loss, grad, _ = _loss("gspo", eps_low=0.2, eps_high=0.2)
    assert loss == pytest.approx(-0.5 * math.exp(0.05) + 0.25, abs=1e-6)
    assert grad[0, 1] == pytest.approx(-0.25 * math.exp(0.05), abs=1e-6)
    assert float(grad[0, 1]) == pytest.approx(float(grad[0, 2]), abs=1e-7)


def test_cispo_clipped_is_weight_keeps_gradient() -> None:
    # w = sg[min(r, 1.1)]: 1.1, 0.904837, 1 ; per token -w*A*logp: -1.1*1*-1 = 1.1 ; -0.904837*-2 = 1.809675 ;
    # -1*-0.5*-0.5 = -0.25 ; token mean over 3
    loss, grad, stats = _loss("cispo", eps_high_is=0.1)
    assert loss == pytest.approx((1.1 + 2 * math.exp(-0.1) - 0.25) / 3, abs=1e-6)
    assert loss == pytest.approx(0.886558, abs=1e-6)
    assert grad[0, 1] == pytest.approx(-1.1 / 3, abs=1e-6)  # clipped weight, gradient still flows
    assert stats["clip_frac"] == pytest.approx(1 / 3)


def test_kl_k3_to_reference() -> None:
    # ref - logp = -0.1 on seq0 tokens, 0 on seq1: k3 = exp(-0.1) + 0.1 - 1 = 0.0048374 ; grpo weights 0.25, 0.25
    ref = torch.tensor([[0.0, -1.1, -2.1], [0, -0.5, 0]])
    logp = _logp()
    w = token_weights(MASK, "grpo", 2, 3, 4)
    base, _ = policy_loss(logp, OLD, ADV, w, "grpo")
    loss, stats = policy_loss(logp, OLD, ADV, w, "grpo", ref_logp=ref, kl_coef=0.5)
    k3 = math.exp(-0.1) + 0.1 - 1
    assert float((loss - base).detach()) == pytest.approx(0.5 * 0.5 * k3, abs=1e-7)
    assert stats["kl"] == pytest.approx(2 * k3 / 3, abs=1e-7)


def test_on_policy_ratio_one_gives_plain_policy_gradient() -> None:
    logp = _logp()
    w = token_weights(MASK, "grpo", 2, 3, 4)
    loss, _ = policy_loss(logp, logp.detach(), ADV, w, "grpo")
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.25 * -1 * 2 + 0.5 * 0.5, abs=1e-7)
    assert logp.grad[1, 1] == pytest.approx(0.25)  # -A * weight = 0.5 * 0.5


def test_micro_batches_sum_to_the_full_batch() -> None:
    logp = torch.randn(4, 6)
    old = logp + 0.1 * torch.randn(4, 6)
    mask = (torch.rand(4, 6) > 0.3).float()
    adv = torch.randn(4)
    for kind in ("grpo", "dr_grpo", "dapo", "cispo", "gspo"):
        n_tok = int(mask.sum())
        full, _ = policy_loss(logp, old, adv, token_weights(mask, kind, 4, n_tok, 6), kind)
        parts = sum(policy_loss(logp[i:i + 2], old[i:i + 2], adv[i:i + 2],
                                token_weights(mask[i:i + 2], kind, 4, n_tok, 6), kind)[0] for i in (0, 2))
        assert float(full) == pytest.approx(float(parts), abs=1e-6), kind


def test_advantages() -> None:
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.7, 0.7, 0.7, 0.7])
    adv = group_advantages(r, 4)
    assert adv.tolist() == pytest.approx([0.5, -0.5, 0, 0, 0, 0, 0, 0])
    scaled = group_advantages(r, 4, scale=True)
    assert scaled[:4].tolist() == pytest.approx([0.5 / 0.353553, -0.5 / 0.353553, 0, 0], abs=1e-4)
    assert torch.all(scaled[4:] == 0)  # constant group: zero advantage, no division blow-up


def test_token_logprobs_alignment() -> None:
    logits = torch.randn(1, 4, 5)
    ids = torch.tensor([[1, 2, 3, 4]])
    lp = token_logprobs(logits, ids, temperature=2.0)
    assert lp[0, 0] == 0
    assert lp[0, 2] == pytest.approx(float(torch.log_softmax(logits[0, 1] / 2.0, -1)[3]), abs=1e-6)


def test_unknown_loss_type() -> None:
    with pytest.raises(ValueError, match="unknown loss_type"):
        token_weights(MASK, "ppo", 2, 3, 4)


def test_masked_logprobs_match_full_logits(tiny_model) -> None:  # type: ignore[no-untyped-def]
    """The LM head runs only from the batch's first loss token on; on those tokens the log-probs equal the full
    forward's, and they carry the gradient."""
    from transformers import AutoModelForCausalLM

    from toolgym.policies.hf import supports_logits_to_keep
    from toolgym.train.loss import masked_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert supports_logits_to_keep(model)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (2, 12), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 10:] = 0
    mask = torch.zeros(2, 12)
    mask[0, 7:] = 1
    mask[1, 5:10] = 1  # the window starts at column 5
    full = token_logprobs(model(input_ids=ids, attention_mask=attn).logits, ids, 0.7)
    part = masked_logprobs(model, ids, attn, mask, 0.7)
    assert part.shape == full.shape
    assert torch.allclose(part * mask, full * mask, atol=1e-5)
    assert torch.all(part[:, :4] == 0)
    (part * mask).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_shared_prefix_forward_equals_the_full_forward(tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Rows that share a prompt prefix run it once (one row, its KV cache broadcast): the log-probs and the
    gradient of every weight equal those of the full forward pass; with no shared prefix the full pass runs."""
    import copy

    from transformers import AutoModelForCausalLM

    import toolgym.policies.kv_cache as H
    import toolgym.train.loss as L
    from toolgym.policies.kv_cache import shared_prefix_len

    used = []
    real = H.expand_prefix_cache
    monkeypatch.setattr(H, "expand_prefix_cache", lambda past, b: used.append(real(past, b)) or used[-1])

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 100, (4, 40), generator=g)
    ids[:, :24] = ids[0, :24]
    attn = torch.ones_like(ids)
    attn[1, 33:] = 0
    attn[3, 29:] = 0
    mask = torch.zeros(4, 40)
    mask[:, 26:] = 1
    mask = mask * attn
    assert shared_prefix_len(ids, attn) == 24 and shared_prefix_len([[1, 2, 3], [1, 2, 4]]) == 2
    shared = L.masked_logprobs(model, ids, attn, mask, 0.7)
    full = token_logprobs(twin(input_ids=ids, attention_mask=attn).logits, ids, 0.7)
    assert torch.allclose(shared * mask, full * mask, atol=1e-5)
    (shared * mask).sum().backward()
    (full * mask).sum().backward()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-4, rtol=1e-4)
    assert used == [True]  # the shared path ran (a cache type it cannot broadcast would fall back)


@pytest.mark.parametrize("scale", [False, True])
def test_a_constant_group_of_eight_gets_exactly_zero(scale: bool) -> None:
    """Eight equal rewards of 1.2 (outcome 1 + format 0.2): their float32 mean is an ulp off, which left each 1.2e-7
    of advantage, and with scale_rewards (divided by a std of 1e-7) about 0.1 -- the same push on every token of a
    group that compared nothing. A constant group must come out exactly 0; a mixed group as before."""
    for v in (1.2, 0.7, 0.4185, 0.3):
        r = torch.tensor([v] * 8 + [v] * 7 + [v - 1.0], dtype=torch.float64)
        adv = group_advantages(r, 8, scale=scale)
        assert adv.dtype == torch.float32
        assert torch.all(adv[:8] == 0), (v, adv[:8].abs().max())
        want = torch.tensor([1 / 8] * 7 + [-7 / 8])
        if scale:
            want = want / (math.sqrt(7) / 8 + 1e-6)
        assert adv[8:].tolist() == pytest.approx(want.tolist(), abs=1e-5)


def test_select_groups_skips_a_constant_group_of_eight(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """skip_constant_groups leaves out a group of eight equal rewards (none of its sequences is trained on) and
    zero_adv_groups counts it; the mixed group is kept whole."""
    from toolgym.train.config import GRPOConfig
    from toolgym.train.grpo import GRPOTrainer
    from toolgym.types import TokenTrace, Trajectory

    tr = GRPOTrainer.__new__(GRPOTrainer)
    tr.cfg = GRPOConfig(model="unused", output_dir=tmp_path, env="unused", rollouts_per_example=8,
                        skip_constant_groups=True)
    rewards = [1.2] * 8 + [1.2] * 7 + [0.2]
    trajs = [Trajectory(example_id=i // 8, rollout_index=i % 8, reward=r,
                        tokens=TokenTrace(ids=[1, 2, 3], mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0]))
             for i, r in enumerate(rewards)]
    seqs, adv, stats, used = tr.select_groups(trajs)
    assert stats["zero_adv_groups"] == 1.0 and stats["groups_used"] == 2
    assert len(seqs) == 8 and {t.example_id for t in used} == {1}
    assert torch.all(adv != 0)
